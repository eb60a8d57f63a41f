-- Shared head of every read/write lock script (mod.rs puts it in front of each one, after
-- `fence.lua`, since a Redis script cannot include another).
--
-- Three keys per lock, all in the lock's Redis Cluster slot (key.rs names them; no lock name
-- reaches the two helpers): KEYS[1] the lock hash, KEYS[2] its readers, KEYS[3] its waiting
-- writers' intents, then KEYS[4] the fencing counter (acquire scripts, only when ARGV[7] is
-- '1'). Every field and member is ours; an owner is `client id:context`.
-- The hash:
--   rwlock          '2': marks the hash as a read/write lock of this layout, whatever else
--                   is in it (a waiting writer's intent alone keeps the name taken too)
--   mode            'read' or 'write' while someone holds the lock (absent otherwise)
--   writer          the owner of the write hold
--   writer-until    when its lease ends: server time, ms since the epoch
--   writer-fence    the fencing token of the write tenure ('' when none was asked for)
--   writer-holds    the nonces of the live write acquisitions, space-separated (the writer's
--                   re-entry depth is their number)
--   writer-holder   who took the first of them, for inspection
--   r:<owner>       the nonces of that reader's live read acquisitions, space-separated
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
-- for every other lock). A script reads its own owner's fields (HMGET, ZSCORE), counts and
-- finds the latest lease or intent in the sorted sets (ZCOUNT, ZREVRANGE 0 0: logarithmic),
-- and clears at most PRUNE_MAX of the readers and intents that have expired (each expired
-- entry is cleared once, by some later call: amortised, the pruning costs a constant per
-- call). Entries that have expired but are not cleared yet count for nothing: every count
-- and every latest end is taken over the live range only, and the caller's own entries are
-- judged by their own score. Every script keeps the keys' PEXPIRE at the latest live lease or
-- intent, so an abandoned lock still vanishes on its own.
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

-- How many expired readers, and expired intents, one call clears at most (a string: every
-- argument to redis.call goes as one, see fence.lua).
local PRUNE_MAX = '8'

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

-- The latest score in the sorted set `key` (0 when it is empty).
local function latest(key)
  local top = redis.call('zrevrange', key, '0', '0', 'withscores')
  return tonumber(top[2]) or 0
end

-- The number of live entries (ending after `now`) in the sorted set `key`.
local function live(key, now)
  return redis.call('zcount', key, '(' .. int(now), '+inf')
end

-- Reads what this call needs of the lock for `owner`. Returns the state, or nil and the
-- reply to give when the key holds something that is not a read/write lock (the caller then
-- leaves it untouched): {-3, mode} for another lock mode of the same name, {-1, type} for the
-- application's data. A writer whose lease has ended is removed (`dirty`: the caller then
-- settles), and so are the caller's own read holds once its lease has ended.
local function load(now, owner)
  local v = redis.pcall('hmget', LOCK, 'rwlock', 'mode', 'writer', 'writer-until',
    'writer-fence', 'writer-holds', 'r:' .. owner, 'owner')
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
  -- `expires`: when the keys expire (server ms; all three share it, see `stretch`).
  local s = {dirty = false, expires = 0}
  local ttl = redis.call('pttl', LOCK)
  if not v[1] then
    if ttl == -2 then
      -- Free. Whatever the helpers still hold was left by a removal that knew only the hash
      -- (an operator's DEL): it belongs to no live lock.
      redis.call('del', READERS, INTENTS)
      s.fresh = true
      return s
    end
    -- Our locks always expire: a hash without expiry is the application's own.
    if ttl == -1 then
      return nil, {-1, 'hash without expiry'}
    end
    if v[8] then
      return nil, {-3, 'reentrant'}
    end
    return nil, {-1, 'hash that is not a read/write lock'}
  end
  if ttl < 0 then
    return nil, {-1, 'hash without expiry'}
  end
  s.expires = now + ttl
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
    s.ends = tonumber(redis.call('zscore', READERS, owner))
    if not s.ends or s.ends <= now then
      -- The caller's own read lease has ended: its holds are gone, whatever it asks.
      redis.call('hdel', LOCK, 'r:' .. owner)
      redis.call('zrem', READERS, owner)
      s.own, s.ends = nil, nil
    end
  end
  return s
end

-- Clears up to PRUNE_MAX readers whose lease has ended, and, unless `readers_only`, every
-- intent that has lapsed. Run by the calls that add, renew or remove a hold, not by busy
-- answers (a waiting writer's attempts must stay cheap): every entry is added by such a
-- call, so the expired ones never pile up, and each is cleared once (amortised, a constant
-- per call). Expired entries change no decision meanwhile: counts and latest ends are taken
-- over live scores only.
local function prune(now, readers_only)
  local ended = redis.call('zrangebyscore', READERS, '-inf', int(now), 'limit', '0',
    PRUNE_MAX)
  if #ended > 0 then
    local fields = {}
    for i, o in ipairs(ended) do
      fields[i] = 'r:' .. o
    end
    redis.call('hdel', LOCK, unpack(fields))
    redis.call('zrem', READERS, unpack(ended))
  end
  if not readers_only then
    redis.call('zremrangebyscore', INTENTS, '-inf', int(now))
  end
end

-- After a lease or intent was written that ends at `ends`: the keys live at least until
-- then. All three keys share one expiry, the latest end among their entries, so a key never
-- expires before its own entries (nor the hash before its helpers' entries). `created`: the
-- helper key just written, which a ZADD may have created without an expiry.
local function stretch(s, now, ends, created)
  if ends > s.expires then
    s.expires = ends
    local ms = int(ends - now)
    redis.call('pexpire', LOCK, ms)
    if s.fresh then
      -- The helpers were cleared by load(): only the one just written exists.
      if created then
        redis.call('pexpire', created, ms)
      end
      return
    end
    redis.call('pexpire', READERS, ms)
    redis.call('pexpire', INTENTS, ms)
  elseif created then
    redis.call('pexpire', created, int(s.expires - now))
  end
end

-- After a hold or an intent was removed: writes `mode` and brings the keys' expiry down to
-- the latest live lease or intent, or deletes them once nothing is left. Leaves in `s` the
-- latest reader's lease end and (unless `removed` is given) the latest intent's end;
-- returns false when it deleted the keys. `removed`: the end of the live lease just
-- removed, when that is all that changed. If it ended well before the keys' expiry, the
-- entry that sets the expiry is another one, still live (the 2 ms allow for PTTL's
-- rounding): the expiry stands and the keys stay.
local function settle(s, now, removed)
  s.readers_until = latest(READERS)
  local mode = false
  if s.writer then
    mode = 'write'
  elseif s.readers_until > now then
    mode = 'read'
  end
  if not (removed and removed < s.expires - 2) then
    s.intents_until = latest(INTENTS)
    local last = math.max(s.readers_until, s.intents_until)
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
      local ms = int(last - now)
      redis.call('pexpire', LOCK, ms)
      redis.call('pexpire', READERS, ms)
      redis.call('pexpire', INTENTS, ms)
    end
  end
  if mode and s.mode ~= mode then
    redis.call('hset', LOCK, 'mode', mode)
  elseif not mode and s.mode then
    redis.call('hdel', LOCK, 'mode')
  end
  s.mode = mode or nil
  return true
end

-- True when a writer other than `owner` waits for the lock.
local function others_intend(s, owner, now)
  if s.fresh then
    return false
  end
  local n = live(INTENTS, now)
  if n ~= 1 then
    return n > 1
  end
  local mine = tonumber(redis.call('zscore', INTENTS, owner))
  return not (mine and mine > now)
end

-- Makes `owner`'s read lease last at least `ttl` ms from `now` (never shortening it: another
-- of its holds may count on it). The owner must be a live reader, or just added.
local function renew_read(s, owner, now, ttl)
  if now + ttl > s.ends then
    s.ends = now + ttl
    local added = redis.call('zadd', READERS, int(s.ends), owner) == 1
    stretch(s, now, s.ends, added and READERS)
  end
  return s.ends
end

-- Adds the read acquisition `nonce` of `owner`, whose lease runs `ttl` ms from `now` (never
-- shortening the lease the owner already has: another of its holds may count on it).
local function add_read(s, owner, nonce, now, ttl)
  if not s.fresh then
    prune(now, true)
  end
  if s.own then
    s.own = s.own .. ' ' .. nonce
  else
    s.own, s.ends = nonce, 0
  end
  local fields = {'r:' .. owner, s.own}
  if s.fresh then
    table.insert(fields, 'rwlock')
    table.insert(fields, '2')
  end
  if not s.writer and s.mode ~= 'read' then
    table.insert(fields, 'mode')
    table.insert(fields, 'read')
    s.mode = 'read'
  end
  redis.call('hset', LOCK, unpack(fields))
  renew_read(s, owner, now, ttl)
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
