-- Shared head of every semaphore script (mod.rs puts it in front of each one, after
-- `fence.lua`, since a Redis script cannot include another).
--
-- One sorted set per semaphore name, so all of its state sits in one Redis Cluster slot:
--   member 'permits'   score -N: the limit, as recorded by the holder that found the name free
--   member <owner>     one per permit held: the acquisition's owner token (which carries who
--                      took it, for inspection); score: when its lease ends, server ms
-- An owner token always holds a tab, so no owner is spelled 'permits'; the limit's negative
-- score keeps it first in the order and out of every range of lease ends.
--
-- KEYS[2], the permit slots (a hash in the same slot), holds each fenced permit's slot:
--   field <owner>      value: its slot, 0 to N-1, the lowest no live fenced permit held when
--                      it was taken
-- A slot is held while its owner is a member of the sorted set, so it ends with that permit's
-- own lease, renewed with it and dropped with it; a field whose owner is gone is stale, and
-- the next fenced acquisition removes it. The hash lives and goes with the sorted set.
-- Each permit's lease is its own score: a crashed holder's permit ends with its own lease
-- however long the others keep renewing theirs, and frees that one permit only. Every script
-- drops the permits whose lease has ended before it decides anything, and keeps the key's
-- PEXPIRE at the latest live lease, so an abandoned semaphore still vanishes on its own (and
-- its limit with it: the next holder to find it free records its own).
--
-- Time is the server's own (TIME), never a client's: client clocks need not agree.

local LIMIT = 'permits'

-- The server's time in ms, and in us for a new fencing counter.
local function server_ms()
  local t = redis.call('time')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

-- Drops the permits whose lease has ended. Returns the recorded limit while a permit is
-- held; nil when the name is free (nothing is then left at the key); or nil and the reply to
-- give when the key holds something that is not a semaphore (left untouched): {-3, mode}
-- for a lock of another mode of the same name, {-1, type} for the application's data.
local function load(now)
  local slots = redis.call('type', KEYS[2]).ok
  if slots ~= 'none' and slots ~= 'hash' then
    return nil, {-1, slots .. ' at its permit slots'}
  end
  local kind = redis.call('type', KEYS[1]).ok
  if kind == 'none' then
    return nil
  end
  local ttl = redis.call('pttl', KEYS[1])
  if kind ~= 'zset' then
    -- Our locks always expire: a key without expiry is the application's own.
    if kind == 'string' and ttl >= 0 then
      return nil, {-3, 'setnx'}
    end
    if kind == 'hash' and ttl >= 0 then
      if redis.call('hexists', KEYS[1], 'owner') == 1 then
        return nil, {-3, 'reentrant'}
      end
      -- A read/write lock: the side it is held on (a waiting writer's intent alone: write).
      return nil, {-3, redis.call('hget', KEYS[1], 'mode') or 'write'}
    end
    return nil, {-1, kind}
  end
  if ttl < 0 then
    return nil, {-1, 'sorted set without expiry'}
  end
  local limit = tonumber(redis.call('zscore', KEYS[1], LIMIT))
  if not limit or limit >= 0 then
    return nil, {-1, 'sorted set that is not a semaphore'}
  end
  redis.call('zremrangebyscore', KEYS[1], '0', int(now))
  if redis.call('zcard', KEYS[1]) == 1 then
    redis.call('del', KEYS[1], KEYS[2])
    return nil
  end
  return -limit
end

-- The keys live until the latest live lease, and are deleted once no permit is held.
local function settle(now)
  local last = redis.call('zrange', KEYS[1], '-1', '-1', 'withscores')
  local ends = tonumber(last[2])
  if not ends or ends <= now then
    redis.call('del', KEYS[1], KEYS[2])
    return
  end
  redis.call('pexpire', KEYS[1], int(ends - now))
  redis.call('pexpire', KEYS[2], int(ends - now))
end
