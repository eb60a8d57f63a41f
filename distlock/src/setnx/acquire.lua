-- Take the lock: SET NX PX with the owner's token, and issue the next fencing token.
-- KEYS[1] lock key, KEYS[2] fencing counter (same slot)
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds, ARGV[3] '1' when an earlier attempt of
-- this acquisition may have succeeded without its reply reaching us, ARGV[4] '1' when the
-- caller wants the holder's remaining ttl (a waiter that knows a recent one does not)
-- Returns {1, fencing token} when held, {0, holder's remaining ms or -1 if not asked} when busy,
-- {-1, type} when a key holds something that is not one of our locks.
-- Two calls on either common path (taken, busy): waiters retry this script, so its cost is
-- what a contended lock costs the server.
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('incr', KEYS[2])
  if type(fence) == 'table' then
    -- The counter key holds the application's data: undo our write, leave theirs alone.
    redis.call('del', KEYS[1])
    return {-1, redis.call('type', KEYS[2]).ok .. ' at its fencing counter'}
  end
  return {1, fence}
end
if ARGV[3] ~= '1' and ARGV[4] ~= '1' then
  return {0, -1}
end
local ttl = redis.call('pttl', KEYS[1])
if ttl >= 0 then
  if ARGV[3] == '1' and redis.pcall('get', KEYS[1]) == ARGV[1] then
    -- Our own token: the earlier attempt took the lock but its reply was lost.
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  return {0, ttl}
end
-- Our locks always expire: a key without expiry is the application's own value.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'string' then
  kind = 'string without expiry'
end
return {-1, kind}
