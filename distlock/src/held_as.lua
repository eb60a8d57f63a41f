-- What holds a lock name whose key is not a string (`GET` refused it): put in front of the
-- scripts that take a name as a setnx lock (setnx, and every name of a `lock_many` set), so
-- the answer has one home.
-- Returns {-3, mode} when the name is held as the reentrant or read/write lock or the
-- semaphore of the same name, {-1, type} when the key holds the application's data.
local function held_as(key)
  local kind = redis.call('type', key).ok
  if kind == 'zset' and redis.call('pttl', key) >= 0 and redis.call('zscore', key, 'permits') then
    return {-3, 'semaphore'}
  end
  if kind == 'hash' and redis.call('pttl', key) >= 0 then
    if redis.call('hexists', key, 'owner') == 1 then
      return {-3, 'reentrant'}
    end
    -- A read/write lock: the side it is held on (a waiting writer's intent alone: write).
    return {-3, redis.call('hget', key, 'mode') or 'write'}
  end
  return {-1, kind}
end
