-- Take the lock: SET with the owner's token and a ttl if the key is free, and issue the next
-- fencing token.
-- KEYS[1] lock key, KEYS[2] fencing counter (same slot)
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds
-- Returns {1, fencing token} when held, {0, holder's remaining ms} when busy,
-- {-1, type} when the key holds something that is not one of our locks.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  -- INCR first: if the counter key holds the application's data it fails here, before
  -- anything is written (a script that fails midway keeps its earlier writes).
  local fence = redis.call('incr', KEYS[2])
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
if kind ~= 'string' then
  return {-1, kind}
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  -- Our own token: an earlier attempt of this acquisition succeeded but its reply was lost.
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
local ttl = redis.call('pttl', KEYS[1])
if ttl < 0 then
  -- Our locks always expire; a string without expiry is the application's own value.
  return {-1, 'string without expiry'}
end
return {0, ttl}
