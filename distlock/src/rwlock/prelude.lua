-- Shared head of every read/write lock script (mod.rs puts it in front of each one, after
-- `fence.lua`, since a Redis script cannot include another).
--
-- Three keys per lock, all in the lock's Redis Cluster slot (key.rs names them; no lock name
-- reaches the two helpers): KEYS[1] the lock hash, KEYS[2] its readers, KEYS[3] its waiting
-- writers' intents, then KEYS[4] the fencing counter (acquire scripts, only when ARGV[7] is
-- '1'). Every field and member is ours; an owner is `client id:context`.
-- The hash:
--   rwlock-layout   '3': marks the hash as a read/write lock of this layout, whatever else
--                   is in it (a waiting writer's intent alone keeps the name taken too).
--                   Earlier layouts marked it `rwlock`: each refuses the other's hash
--   mode            'read' or 'write' while someone holds the lock (absent otherwise)
--   writer          the owner of the write hold
--   writer-until    when its lease ends: server time, ms since the epoch
--   writer-fence    the fencing token of the write tenure ('' when none was asked for)
--   writer-holds    the nonces of the live write acquisitions, space-separated (the writer's
--                   re-entry depth is their number)
--   writer-holder   who took the first of them, for inspection
--   r:<owner>       the nonces of that reader's live read acquisitions, space-separated
--   r-until:<owner> the end of that reader's lease (server ms), the same as its score among
--                   the readers: a call reads its own owner's lease with the HMGET it needs
--                   anyway
--   keys-until      when the hash expires (server ms): its PEXPIRE, written with it, so no
--                   call asks the server for it
--   helpers-until   when the two sorted sets expire (server ms): at or after every entry's end
--   intents-until   at or after the end of the latest live intent (absent or passed: there is
--                   none, and a reader need not count them)
--   readers-from    at or before the end of the earliest read lease (absent: no reader was
--                   added since the readers were last found empty); until it passes, no
--                   reader has expired and no call looks for expired ones
-- The readers (sorted set): member <owner>, score the end of its read lease (server ms).
-- The intents (sorted set): member <owner>, score the end of its intent (server ms).
--
-- Each reader's lease is its own score, so a crashed reader's share ends with its own lease
-- however long the others keep renewing theirs. A nonce per acquisition, not a counter, makes
-- every call idempotent: a retried acquire finds its nonce and counts nothing twice, and a
-- retried or stale release (a guard from an earlier tenure) finds none and frees nothing.
--
-- No script reads the whole state: its work must not grow with the crowd on the name (ten
-- thousand readers and thousands of waiting writers on one name must leave the server time
-- for every other lock). A script reads its own owner's fields and the summaries above in one
-- HMGET, looks for live intents and finds the latest lease or intent in the sorted sets only
-- where the summaries cannot answer (ZRANGEBYSCORE with a limit, ZREVRANGE 0 0: logarithmic), and clears at most PRUNE_MAX
-- of the readers and intents that have expired (each expired entry is cleared once, by some
-- later call: amortised, the pruning costs a constant per call). Entries that have expired
-- but are not cleared yet count for nothing: every count and every latest end is taken over
-- the live range only, and the caller's own entries are judged by their own score. The hash
-- expires at the latest live lease or intent, so an abandoned lock still vanishes on its own;
-- the helpers may outlive it (see `write`), holding nothing live, until the next call on the
-- name finds the hash gone and deletes them or they expire.
--
-- Time is the server's own (TIME), never a client's: client clocks need not agree, and a
-- value computed from one is what made seed 004's cluster variant unsafe.

local LOCK, READERS, INTENTS = KEYS[1], KEYS[2], KEYS[3]

-- ARGV[7] is '1' when the acquisition asks for a fencing token (acquire scripts only); the
-- fencing counter, KEYS[4], is declared only then.
local FENCING = ARGV[7] == '1'
local FENCE = KEYS[4]

-- Redis < 5 refuses writes after TIME unless effects are replicated instead of the script;
-- later versions always do that and keep this call as a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- A waiting writer's intent lasts its ttl, at most this long, and is renewed by each of its
-- attempts: a writer that died stops blocking new readers soon after (one that gives up
-- withdraws it at once: see write_release.lua).
local INTENT_MAX_MS = 2000

-- How many expired readers one call clears at most.
local PRUNE_MAX = 8

-- Each sorted set holds this member, scored 0, from its creation until it is deleted: no
-- owner is spelled so, and a set that never empties is never created again by a ZADD, so
-- the expiry it was given stays (a ZADD answering 2 tells the set was created). Every count,
-- latest end and pruning looks above 0 only.
local KEEP = ''

-- The server's time in ms, and in us for a new fencing counter.
local function server_ms()
  local t = redis.call('time')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

-- True when the space-separated `list` holds `nonce`.
local function has(list, nonce)
  return list and string.find(' ' .. list .. ' ', ' ' .. nonce .. ' ', 1, true) ~= nil
end

-- `list` without one `nonce` ('' when none is left).
local function without(list, nonce)
  local rest, dropped = {}, false
  for n in string.gmatch(list, '%S+') do
    if n == nonce and not dropped then
      dropped = true
    else
      rest[#rest + 1] = n
    end
  end
  return table.concat(rest, ' ')
end

-- The latest score in the sorted set `key` (0 when it holds no entry).
local function latest(key)
  local top = redis.call('zrevrange', key, '0', '0', 'withscores')
  return tonumber(top[2]) or 0
end

-- Reads what this call needs of the lock for `owner`. Returns the state, or nil and the
-- reply to give when the key holds something that is not a read/write lock (the caller then
-- leaves it untouched): {-3, mode} for another lock mode of the same name, {-1, type} for the
-- application's data. A writer whose lease has ended is removed (`dirty`: the caller then
-- settles), and so are the caller's own read holds once its lease has ended.
local function load(now, owner)
  local v = redis.pcall('hmget', LOCK, 'rwlock-layout', 'mode', 'writer', 'writer-until',
    'writer-fence', 'writer-holds', 'r:' .. owner, 'keys-until', 'helpers-until',
    'intents-until', 'readers-from', 'r-until:' .. owner)
  if v.err then
    local kind = redis.call('type', LOCK).ok
    if kind == 'string' and redis.call('pttl', LOCK) >= 0 then
      return nil, {-3, 'setnx'}
    end
    if kind == 'zset' and redis.call('pttl', LOCK) >= 0
        and redis.call('zscore', LOCK, 'permits') then
      return nil, {-3, 'semaphore'}
    end
    return nil, {-1, kind}
  end
  -- `expires`: when the hash expires, `helpers`: when the sorted sets do (server ms).
  local s = {dirty = false, expires = 0, helpers = 0, intents_until = 0}
  if not v[1] then
    local ttl = redis.call('pttl', LOCK)
    if ttl == -2 then
      -- Free. Whatever the helpers still hold belongs to no live lock: they outlived the
      -- hash (see `write`), or an operator deleted the hash alone.
      redis.call('del', READERS, INTENTS)
      s.fresh = true
      return s
    end
    -- Our locks always expire: a hash without expiry is the application's own.
    if ttl == -1 then
      return nil, {-1, 'hash without expiry'}
    end
    if redis.call('hexists', LOCK, 'owner') == 1 then
      return nil, {-3, 'reentrant'}
    end
    return nil, {-1, 'hash that is not a read/write lock'}
  end
  s.expires, s.helpers = tonumber(v[8]), tonumber(v[9])
  if not (s.expires and s.helpers) then
    return nil, {-1, 'hash that is not a read/write lock'}
  end
  s.intents_until = tonumber(v[10]) or 0
  s.readers_from = tonumber(v[11])
  -- A missing field comes back as false: nil instead, for the tests below.
  s.mode, s.writer, s.wuntil = v[2] or nil, v[3] or nil, tonumber(v[4])
  s.wholds, s.own = v[6] or nil, v[7] or nil
  -- -1: the tenure was taken without a token.
  s.wfence = tonumber(v[5]) or -1
  if s.writer and not (s.wuntil and v[5] and s.wholds) then
    return nil, {-1, 'hash that is not a read/write lock'}
  end
  if s.writer and s.wuntil <= now then
    redis.call('hdel', LOCK, 'writer', 'writer-until', 'writer-fence', 'writer-holds',
      'writer-holder')
    s.writer, s.wuntil, s.wholds = nil, nil, nil
    s.dirty = true
  end
  if s.own then
    -- A hash written before `r-until:` was kept has the lease in the readers' set only.
    s.ends = tonumber(v[12]) or tonumber(redis.call('zscore', READERS, owner))
    if not s.ends or s.ends <= now then
      -- The caller's own read lease has ended: its holds are gone, whatever it asks.
      redis.call('hdel', LOCK, 'r:' .. owner, 'r-until:' .. owner)
      redis.call('zrem', READERS, owner)
      s.own, s.ends = nil, nil
    end
  end
  return s
end

-- Adds to `fields` the summaries this call changed, and writes `fields` (a flat list of
-- field and value, possibly empty) into the hash.
local function flush(s, fields)
  if s.from_changed then
    fields[#fields + 1] = 'readers-from'
    fields[#fields + 1] = s.readers_from and int(s.readers_from) or ''
    s.from_changed = false
  end
  if s.intents_changed then
    fields[#fields + 1] = 'intents-until'
    fields[#fields + 1] = int(s.intents_until)
    s.intents_changed = false
  end
  if #fields > 0 then
    redis.call('hset', LOCK, unpack(fields))
  end
end

-- Clears up to PRUNE_MAX readers whose lease has ended, once `readers-from` says one may
-- have, and, unless `readers_only`, every intent that has lapsed. Run by the calls that add
-- or renew a hold or end a write tenure, not by busy answers (a waiting writer's attempts
-- must stay cheap): every reader is added by such a call, so the expired ones never pile
-- up, and each is cleared once (amortised, a constant per call). Expired entries change no
-- decision meanwhile: counts and latest ends are taken over live scores only. The new
-- `readers-from` goes out with the caller's next `flush`.
local function prune(s, now, readers_only)
  if s.readers_from and s.readers_from <= now then
    local first = redis.call('zrangebyscore', READERS, '(0', '+inf', 'withscores', 'limit',
      '0', int(PRUNE_MAX))
    local ended, fields, from = {}, {}, nil
    for i = 1, #first, 2 do
      local ends = tonumber(first[i + 1])
      if ends > now then
        from = ends
        break
      end
      ended[#ended + 1] = first[i]
      fields[#fields + 1] = 'r:' .. first[i]
      fields[#fields + 1] = 'r-until:' .. first[i]
    end
    if #ended > 0 then
      redis.call('hdel', LOCK, unpack(fields))
      redis.call('zrem', READERS, unpack(ended))
    end
    if not from and #ended == PRUNE_MAX then
      -- More may have ended: the next call looks again.
      from = now
    end
    s.readers_from, s.from_changed = from, true
  end
  -- Intents are registered only with the summary raised past them, so one that lapsed after
  -- the summary came down to 0 is cleared after the next registration.
  if not readers_only and s.intents_until > 0 then
    redis.call('zremrangebyscore', INTENTS, '(0', int(now))
  end
end

-- Writes `fields` into the hash (see `flush`) and, when `ends` is given (a lease or intent
-- just written ends then, server ms), makes the keys live at least until then: the hash
-- exactly until the latest end (its expiry recorded in it, `keys-until`), the helpers with
-- slack. Expiry is set as a point in the server's time (PEXPIREAT), the clock the leases
-- are scored in: a relative PEXPIRE counts from the server's own reading of its clock (the
-- command's, or the script's start), not from `now`, and could end the hash a little before
-- the `keys-until` that later calls trust. A new lease ends a little after the previous one, so helpers that expired at the
-- very latest end would need two PEXPIREs on every call of a stream of readers; they are
-- given twice the time the entry needs instead, and so stretched again once per lease
-- length. A helper that outlives the hash holds nothing live: the next call on the name
-- deletes it (`load`), or it expires. `created`: the helper this call's ZADD created.
local function write(s, now, fields, ends, created)
  local hash_at, helpers_at
  if ends and ends > s.expires then
    s.expires = ends
    hash_at = int(ends)
    fields[#fields + 1] = 'keys-until'
    fields[#fields + 1] = hash_at
  end
  if ends and ends > s.helpers then
    s.helpers = ends + (ends - now)
    helpers_at = int(s.helpers)
    fields[#fields + 1] = 'helpers-until'
    fields[#fields + 1] = helpers_at
  end
  flush(s, fields)
  if hash_at then
    redis.call('pexpireat', LOCK, hash_at)
  end
  if helpers_at and not s.fresh then
    redis.call('pexpireat', READERS, helpers_at)
    redis.call('pexpireat', INTENTS, helpers_at)
  elseif created then
    redis.call('pexpireat', created, int(s.helpers))
  end
end

-- After a hold or an intent was removed: writes `mode` and brings the hash's expiry down to
-- the latest live lease or intent, or deletes the keys once nothing is left. Leaves in `s`
-- the latest reader's lease end, and the latest intent's end (`intents_exact`) unless
-- `removed` is given; returns false when it deleted the keys. `removed`: the end of the live
-- lease just removed, when that is all that changed. If it ended before the hash's expiry,
-- the entry that sets the expiry is another one, still live: the expiry stands.
--
-- Outside a write tenure `keys-until` is the latest live end: every call that removes the
-- latest lease or intent, and every end of a tenure (its release, or the call that finds its
-- lease over: `dirty`), brings it down to the next one. (A writer taking the lock removes its
-- own intent without that: its tenure's end settles. An owner waiting twice with different
-- ttls may shorten its own intent; `intents-until` stays past the first end until no intent
-- is live, and only a writer whose intent lapsed could then miss a wake-up: it comes back on
-- its own, as it must anyway.)
local function settle(s, now, removed)
  local stands = removed and removed < s.expires and not s.dirty
  if stands and not s.writer and s.intents_until < s.expires then
    -- Neither a writer nor an intent ends when the hash expires, so another reader's lease
    -- does, live: no look into the readers is needed, and a reader leaving among others
    -- costs none.
    s.readers_until = s.expires
  else
    s.readers_until = latest(READERS)
  end
  local mode = false
  if s.writer then
    mode = 'write'
  elseif s.readers_until > now then
    mode = 'read'
  end
  local fields, hash_at = {}, nil
  if not stands then
    local intents_until = 0
    if s.intents_until > now then
      intents_until = latest(INTENTS)
    end
    if intents_until ~= s.intents_until then
      s.intents_until, s.intents_changed = intents_until, true
    end
    s.intents_exact = true
    local last = math.max(s.readers_until, intents_until)
    if s.writer then
      last = math.max(last, s.wuntil)
    end
    if last <= now then
      redis.call('del', LOCK, READERS, INTENTS)
      s.mode = nil
      return false
    end
    if last ~= s.expires then
      s.expires = last
      hash_at = int(last)
      fields[#fields + 1] = 'keys-until'
      fields[#fields + 1] = hash_at
    end
  end
  if mode and s.mode ~= mode then
    fields[#fields + 1] = 'mode'
    fields[#fields + 1] = mode
  elseif not mode and s.mode then
    redis.call('hdel', LOCK, 'mode')
  end
  s.mode = mode or nil
  flush(s, fields)
  if hash_at then
    redis.call('pexpireat', LOCK, hash_at)
  end
  return true
end

-- When the live intent of a writer other than `owner` ends (the earliest such end), or nil
-- when no other writer waits for the lock. A reader it turns away sleeps no longer than that:
-- an intent whose writer died is never withdrawn and lapses in silence.
local function others_intend(s, owner, now)
  if s.fresh or s.intents_until <= now then
    return nil
  end
  -- Two live intents at most: enough to tell whether one is someone else's.
  local two = redis.call('zrangebyscore', INTENTS, '(' .. int(now), '+inf', 'withscores',
    'limit', '0', '2')
  if #two == 0 then
    -- The intents the summary counted were withdrawn or had their turn: the readers after
    -- this one need not look again.
    s.intents_until, s.intents_changed = 0, true
    return nil
  end
  if two[1] ~= owner then
    return tonumber(two[2])
  end
  return two[3] and tonumber(two[4])
end

-- Makes `owner`'s read lease last at least `ttl` ms from `now` (never shortening it: another
-- of its holds may count on it), writing `fields` (if given) with it. The owner must be a
-- live reader, or just added.
local function renew_read(s, owner, now, ttl, fields)
  fields = fields or {}
  if now + ttl > s.ends then
    s.ends = now + ttl
    local created = redis.call('zadd', READERS, int(s.ends), owner, '0', KEEP) == 2
    fields[#fields + 1] = 'r-until:' .. owner
    fields[#fields + 1] = int(s.ends)
    if not s.readers_from or s.ends < s.readers_from then
      s.readers_from, s.from_changed = s.ends, true
    end
    write(s, now, fields, s.ends, created and READERS)
  else
    write(s, now, fields)
  end
  return s.ends
end

-- Makes the write tenure's lease last at least `ttl` ms from `now` (never shortening it:
-- another acquisition of the tenure may count on it), writing `fields` (if given) with it.
-- The caller must be the live writer. Returns the lease's end (server ms).
local function renew_write(s, now, ttl, fields)
  fields = fields or {}
  local ends = nil
  if now + ttl > s.wuntil then
    s.wuntil, ends = now + ttl, now + ttl
    fields[#fields + 1] = 'writer-until'
    fields[#fields + 1] = int(s.wuntil)
  end
  write(s, now, fields, ends)
  return s.wuntil
end

-- Adds the read acquisition `nonce` of `owner`, whose lease runs `ttl` ms from `now` (never
-- shortening the lease the owner already has: another of its holds may count on it).
local function add_read(s, owner, nonce, now, ttl)
  if not s.fresh then
    prune(s, now, true)
  end
  if s.own then
    s.own = s.own .. ' ' .. nonce
  else
    s.own, s.ends = nonce, 0
  end
  local fields = {'r:' .. owner, s.own}
  if s.fresh then
    fields[#fields + 1] = 'rwlock-layout'
    fields[#fields + 1] = '3'
  end
  if not s.writer and s.mode ~= 'read' then
    fields[#fields + 1] = 'mode'
    fields[#fields + 1] = 'read'
    s.mode = 'read'
  end
  renew_read(s, owner, now, ttl, fields)
end

-- The fencing counter's current value (0 before the first write, or once it expired unused),
-- or nil and a description when the counter key holds the application's data. A read is a
-- use: the counter's lifetime starts again (see fence.lua), so readers keep seeing the last
-- write's token while the lock is in use.
local function current_fence()
  local v = redis.pcall('get', FENCE)
  if type(v) == 'table' then
    return nil, redis.call('type', FENCE).ok .. ' at its fencing counter'
  end
  if not v then
    return 0
  end
  local n = tonumber(v)
  if not n then
    return nil, 'string at its fencing counter'
  end
  redis.call('pexpire', FENCE, FENCE_KEPT_MS)
  return n
end
