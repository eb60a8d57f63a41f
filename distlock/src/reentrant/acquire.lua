-- Take or re-enter the lock. One hash per lock:
--   owner      the holding owner (client id : context)
--   fence      the fencing token of the current tenure ('' when none was asked for)
--   h:<nonce>  one field per live acquisition of the owner (its re-entry depth is their count);
--              the value says who took it (host, pid, call site, time), for inspection
-- A field per acquisition, not a counter, makes every call idempotent: a retried acquire finds
-- its field and counts nothing twice, a retried or stale release finds no field and frees
-- nothing, and a guard left from an earlier tenure cannot release the owner's new hold.
-- `fence.lua` comes first.
-- KEYS[1] lock key, KEYS[2] fencing counter (same slot; declared only when ARGV[7] is '1';
-- ARGV[8], the setnx lock's waits flag, is unused: these modes publish on every release)
-- ARGV[1] owner, ARGV[2] ttl in milliseconds, ARGV[5] the acquisition's nonce, ARGV[6] who
-- takes it (stored for inspection, never compared), ARGV[7] '1' to mint a fencing token (a
-- tenure taken without one mints it at the first re-entry that asks); ARGV[3]
-- (retry) and ARGV[4] (want the holder's ttl) are unused: the nonce makes retries safe and
-- the busy answer costs nothing extra
-- Returns {1, fencing token or -1 if not asked} when held, {0, holder's remaining ms} when busy,
-- {-1, type} when a key holds something that is not one of our locks, {-3, mode} when the
-- name is held as a lock of another mode.
local owner = redis.pcall('hget', KEYS[1], 'owner')
local ttl = tonumber(ARGV[2])
local fencing = ARGV[7] == '1'
if type(owner) == 'table' then
  -- Not a hash: a setnx lock of the same name (a string that expires), a semaphore (a sorted
  -- set that expires, with its limit), or the application's.
  local kind = redis.call('type', KEYS[1]).ok
  if kind == 'string' and redis.call('pttl', KEYS[1]) >= 0 then
    return {-3, 'setnx'}
  end
  if kind == 'zset' and redis.call('pttl', KEYS[1]) >= 0
      and redis.call('zscore', KEYS[1], 'permits') then
    return {-3, 'semaphore'}
  end
  return {-1, kind}
end
local left = redis.call('pttl', KEYS[1])
if owner == ARGV[1] then
  -- Re-entry (or this acquisition retried) keeps the tenure's token, and never shortens the
  -- lease: an outer hold of the same owner may count on a longer one.
  local fence = tonumber(redis.call('hget', KEYS[1], 'fence'))
  if fencing and not fence then
    -- The tenure was taken without a token and this acquisition asks for one: mint it now
    -- (the owner holds the lock, so it orders after every earlier tenure's).
    local bad
    fence, bad = mint(KEYS[2])
    if not fence then
      return {-1, bad}
    end
    redis.call('hset', KEYS[1], 'fence', int(fence))
  end
  redis.call('hset', KEYS[1], 'h:' .. ARGV[5], ARGV[6])
  if left < ttl then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  if not fencing then
    return {1, -1}
  end
  return {1, fence}
end
if left == -2 then
  local fence, stored = -1, ''
  if fencing then
    local bad
    fence, bad = mint(KEYS[2])
    if not fence then
      -- The counter key holds the application's data; nothing was written yet.
      return {-1, bad}
    end
    stored = int(fence)
  end
  redis.call('hset', KEYS[1], 'owner', ARGV[1], 'fence', stored, 'h:' .. ARGV[5], ARGV[6])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, fence}
end
if left == -1 then
  -- Our locks always expire: a hash without expiry is the application's own.
  return {-1, 'hash without expiry'}
end
if not owner then
  -- A hash that expires but has no owner: the read/write lock of the same name (its marker
  -- field, looked up rather than scanned for: a crowd of readers makes the hash large), or
  -- the application's own hash.
  if redis.call('hexists', KEYS[1], 'rwlock-layout') == 1 then
    return {-3, redis.call('hget', KEYS[1], 'mode') or 'write'}
  end
  return {-1, 'hash that is not a reentrant lock'}
end
return {0, left}
