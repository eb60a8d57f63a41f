-- Take or re-enter the lock: a hash of owner -> hold count, plus the fencing token of the
-- current tenure in the reserved field 'fence' (owners always contain ':', so no clash).
-- KEYS[1] lock key, KEYS[2] fencing counter (same slot)
-- ARGV[1] owner (client id : task), ARGV[2] ttl in milliseconds
-- Returns {1, fencing token} when held, {0, holder's remaining ms} when busy,
-- {-1, type} when the key holds something that is not one of our locks.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  -- INCR first: if the counter key holds other data it fails before anything is written.
  local fence = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], 1, 'fence', fence)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, fence}
end
if kind ~= 'hash' then
  return {-1, kind}
end
local ttl = redis.call('pttl', KEYS[1])
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  -- Re-entry keeps the tenure's token and never shortens the lease.
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  if ttl < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return {1, tonumber(redis.call('hget', KEYS[1], 'fence'))}
end
if ttl < 0 or redis.call('hexists', KEYS[1], 'fence') == 0 then
  return {-1, 'hash that is not a lock'}
end
return {0, ttl}
