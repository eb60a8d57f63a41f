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

-- Gives back a name that an earlier attempt of this acquisition took (its reply was lost),
-- now that this call will not hold it: the key goes, with its waited-for mark when the call
-- declared it, and the name's waiters are woken as by a release, since one may have found it
-- held by that attempt and sleep until the lease it saw. The acquire scripts are not told
-- whether the waiters listen on sharded pub/sub (Redis Cluster), so both are published: a
-- rare path (a lost reply, then a refusal), and a server without SPUBLISH (Redis 6) refuses
-- it harmlessly.
local function give_back(key, mark)
  if mark then
    redis.call('del', key, mark)
  else
    redis.call('del', key)
  end
  redis.pcall('publish', key, '')
  redis.pcall('spublish', key, '')
end
