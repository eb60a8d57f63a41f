-- Shared head of every read/write lock script (mod.rs puts it in front of each one, after
-- `fence.lua`, since a Redis script cannot include another).
--
-- One hash per lock, so all of a lock's state sits in one Redis Cluster slot. Every field is
-- ours; an owner is `client id:context` and so always contains ':'.
--   mode                'read' or 'write' while someone holds the lock (absent otherwise)
--   writer              the owner of the write hold
--   writer-until        when its lease ends: server time, ms since the epoch
--   writer-fence        the fencing token of the write tenure ('' when none was asked for)
--   w:<nonce>           one field per live write acquisition (the writer's re-entry depth
--                       is their count); the value says who took it, for inspection
--   r:<nonce>           one field per live read acquisition; the value is its owner
--   read-until:<owner>  when that reader's lease ends (server time, ms)
--   intent:<owner>      a waiting writer's intent, which ends at this server time (ms)
-- Each reader's lease is its own field, so a crashed reader's share ends with its own lease
-- however long the others keep renewing theirs. A field per acquisition, not a counter, makes
-- every call idempotent: a retried acquire finds its field and counts nothing twice, and a
-- retried or stale release (a guard from an earlier tenure) finds no field and frees nothing.
-- Every script prunes what has expired before it decides anything, and keeps the key's
-- PEXPIRE at the latest live lease or intent, so an abandoned lock still vanishes on its own.
--
-- Time is the server's own (TIME), never a client's: client clocks need not agree, and a
-- value computed from one is what made seed 004's cluster variant unsafe.

-- ARGV[7] is '1' when the acquisition asks for a fencing token (acquire scripts only); the
-- fencing counter, KEYS[2], is declared only then.
local FENCING = ARGV[7] == '1'

-- Redis < 5 refuses writes after TIME unless effects are replicated instead of the script;
-- later versions always do that and keep this call as a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- A waiting writer's intent lasts its ttl, at most this long, and is renewed by each of its
-- attempts: a writer that died or gave up stops blocking new readers soon after.
local INTENT_MAX_MS = 2000

-- The server's time in ms, and in us for a new fencing counter.
local function server_ms()
  local t = redis.call('time')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

local function starts(s, prefix)
  return string.sub(s, 1, #prefix) == prefix
end

-- Reads the lock and deletes the holds and intents that have expired. Returns the live
-- state, or nil and the reply to give when the key holds something that is not a read/write
-- lock (the caller then leaves it untouched): {-3, mode} for another lock mode of the same
-- name, {-1, type} for the application's data.
local function load(now)
  local s = {
    readers = {}, nreaders = 0, intents = {}, nintents = 0,
    reads = {}, writes = {}, nwrites = 0,
    dirty = false,
  }
  local flat = redis.pcall('hgetall', KEYS[1])
  if flat.err then
    local kind = redis.call('type', KEYS[1]).ok
    if kind == 'string' and redis.call('pttl', KEYS[1]) >= 0 then
      return nil, {-3, 'setnx'}
    end
    if kind == 'zset' and redis.call('pttl', KEYS[1]) >= 0
        and redis.call('zscore', KEYS[1], 'permits') then
      return nil, {-3, 'semaphore'}
    end
    return nil, {-1, kind}
  end
  if #flat == 0 then
    return s
  end
  -- Our locks always expire: a hash without expiry is the application's own.
  if redis.call('pttl', KEYS[1]) == -1 then
    return nil, {-1, 'hash without expiry'}
  end
  local untils = {}
  local reads = {}
  local writes = {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    local n = tonumber(v)
    if f == 'mode' then
      s.mode = v
    elseif f == 'writer' then
      s.writer = v
    elseif f == 'writer-until' and n then
      s.wuntil = n
    elseif f == 'writer-fence' then
      -- -1: the tenure was taken without a token.
      s.wfence = n or -1
    elseif starts(f, 'w:') then
      writes[string.sub(f, 3)] = true
    elseif starts(f, 'r:') then
      reads[string.sub(f, 3)] = v
    elseif starts(f, 'read-until:') and n then
      untils[string.sub(f, 12)] = n
    elseif starts(f, 'intent:') and n then
      local owner = string.sub(f, 8)
      if n > now then
        s.intents[owner] = n
        s.nintents = s.nintents + 1
      else
        redis.call('hdel', KEYS[1], f)
        s.dirty = true
      end
    else
      -- Judged after the loop: a hash's fields come in no fixed order.
      s.foreign = s.foreign or f
    end
  end
  if s.foreign then
    if redis.call('hexists', KEYS[1], 'owner') == 1 then
      return nil, {-3, 'reentrant'}
    end
    return nil, {-1, 'hash that is not a read/write lock'}
  end
  if s.writer and not (s.wuntil and s.wfence) then
    return nil, {-1, 'hash that is not a read/write lock'}
  end
  if s.writer and s.wuntil <= now then
    redis.call('hdel', KEYS[1], 'writer', 'writer-until', 'writer-fence')
    s.writer, s.wuntil, s.wfence = nil, nil, nil
    s.dirty = true
  end
  for nonce, _ in pairs(writes) do
    if s.writer then
      s.writes[nonce] = true
      s.nwrites = s.nwrites + 1
    else
      redis.call('hdel', KEYS[1], 'w:' .. nonce)
      s.dirty = true
    end
  end
  for owner, u in pairs(untils) do
    if u > now then
      s.readers[owner] = {count = 0, ends = u}
    end
  end
  for nonce, owner in pairs(reads) do
    local r = s.readers[owner]
    if r then
      r.count = r.count + 1
      s.reads[nonce] = owner
    else
      redis.call('hdel', KEYS[1], 'r:' .. nonce)
      s.dirty = true
    end
  end
  for owner, r in pairs(s.readers) do
    if r.count > 0 then
      s.nreaders = s.nreaders + 1
    else
      s.readers[owner] = nil
    end
  end
  for owner, u in pairs(untils) do
    if not s.readers[owner] then
      redis.call('hdel', KEYS[1], 'read-until:' .. owner)
      s.dirty = true
    end
  end
  return s
end

-- Writes `mode` and the key's expiry after a change: the key lives until the latest live
-- lease or intent, and is deleted once nothing is left.
local function settle(s, now)
  local latest = 0
  if s.writer then
    latest = s.wuntil
  end
  for _, r in pairs(s.readers) do
    latest = math.max(latest, r.ends)
  end
  for _, u in pairs(s.intents) do
    latest = math.max(latest, u)
  end
  if latest <= now then
    redis.call('del', KEYS[1])
    return
  end
  local mode = false
  if s.writer then
    mode = 'write'
  elseif s.nreaders > 0 then
    mode = 'read'
  end
  if mode and s.mode ~= mode then
    redis.call('hset', KEYS[1], 'mode', mode)
  elseif not mode and s.mode then
    redis.call('hdel', KEYS[1], 'mode')
  end
  s.mode = mode or nil
  redis.call('pexpire', KEYS[1], int(latest - now))
end

-- The latest lease end among the readers (0 when there are none).
local function readers_until(s)
  local latest = 0
  for _, r in pairs(s.readers) do
    latest = math.max(latest, r.ends)
  end
  return latest
end

-- True when a writer other than `owner` waits for the lock.
local function others_intend(s, owner)
  for o, _ in pairs(s.intents) do
    if o ~= owner then
      return true
    end
  end
  return false
end

-- Makes `owner`'s read lease last at least `ttl` ms from `now` (never shortening it: another
-- of its holds may count on it). The owner must be a live reader.
local function renew_read(s, owner, now, ttl)
  local r = s.readers[owner]
  if now + ttl > r.ends then
    r.ends = now + ttl
    redis.call('hset', KEYS[1], 'read-until:' .. owner, int(r.ends))
    s.dirty = true
  end
  return r.ends
end

-- Adds the read acquisition `nonce` of `owner`, whose lease runs `ttl` ms from `now` (never
-- shortening the lease the owner already has: another of its holds may count on it).
local function add_read(s, owner, nonce, now, ttl)
  local r = s.readers[owner]
  if not r then
    r = {count = 0, ends = 0}
    s.readers[owner] = r
    s.nreaders = s.nreaders + 1
  end
  r.count = r.count + 1
  s.reads[nonce] = owner
  if now + ttl > r.ends then
    r.ends = now + ttl
    redis.call('hset', KEYS[1], 'r:' .. nonce, owner, 'read-until:' .. owner, int(r.ends))
  else
    redis.call('hset', KEYS[1], 'r:' .. nonce, owner)
  end
  s.dirty = true
end

-- The fencing counter's current value (0 before the first write, or once it expired unused),
-- or nil and a description when the counter key holds the application's data. A read is a
-- use: the counter's lifetime starts again (see fence.lua), so readers keep seeing the last
-- write's token while the lock is in use.
local function current_fence()
  local v = redis.pcall('get', KEYS[2])
  if type(v) == 'table' then
    return nil, redis.call('type', KEYS[2]).ok .. ' at its fencing counter'
  end
  if not v then
    return 0
  end
  local n = tonumber(v)
  if not n then
    return nil, 'string at its fencing counter'
  end
  redis.call('pexpire', KEYS[2], FENCE_KEPT_MS)
  return n
end

