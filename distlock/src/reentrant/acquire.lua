-- Take or re-enter the lock: a hash of owner -> hold count, plus the fencing token of the
-- current tenure in the reserved field 'fence' (owners always contain ':', so no clash).
-- KEYS[1] lock key, KEYS[2] fencing counter (same slot)
-- ARGV[1] owner (client id : task), ARGV[2] ttl in milliseconds; ARGV[3] (retry) and ARGV[4]
-- (want the holder's ttl) are unused: the busy check needs PTTL anyway
-- Returns {1, fencing token} when held, {0, holder's remaining ms} when busy,
-- {-1, type} when a key holds something that is not one of our locks.
local mine = redis.pcall('hexists', KEYS[1], ARGV[1])
if type(mine) == 'table' then
  return {-1, redis.call('type', KEYS[1]).ok}
end
local ttl = redis.call('pttl', KEYS[1])
if mine == 1 then
  -- Re-entry keeps the tenure's token and never shortens the lease.
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  if ttl < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return {1, tonumber(redis.call('hget', KEYS[1], 'fence'))}
end
if ttl == -2 then
  local fence = redis.pcall('incr', KEYS[2])
  if type(fence) == 'table' then
    -- The counter key holds the application's data; nothing was written yet.
    return {-1, redis.call('type', KEYS[2]).ok .. ' at its fencing counter'}
  end
  redis.call('hset', KEYS[1], ARGV[1], 1, 'fence', fence)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, fence}
end
if ttl == -1 then
  -- Our locks always expire: a hash without expiry is the application's own.
  return {-1, 'hash without expiry'}
end
return {0, ttl}
