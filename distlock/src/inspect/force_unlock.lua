-- Remove a lock whatever its owner, record why beside it, and wake its waiters. For
-- operators (`Client::force_unlock`): the holder's next renewal is refused, so its guard
-- reports the lease lost; a fencing token keeps its successor's writes ordered after it.
-- KEYS[1] lock key (its string is also its wake-up channel), KEYS[2] last forced unlock
-- record, KEYS[3] and KEYS[4] a read/write lock's readers and intents, KEYS[5] a semaphore's
-- permit slots (all one slot)
-- ARGV[1] reason, ARGV[2] who forces it (host and pid), ARGV[3] how long the record is kept
-- in ms, ARGV[4] 's' to publish with SPUBLISH (Redis Cluster, where the waiters listen on
-- sharded pub/sub)
-- Returns {1, mode, previous owner} when a lock was removed, {0} when there was none, {-1,
-- type} when the key holds something that is not a lock (left untouched).
if redis.replicate_commands then
  redis.replicate_commands()
end
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0}
end
-- Our locks always expire; anything else is the application's data.
if redis.call('pttl', KEYS[1]) < 0 or (kind ~= 'string' and kind ~= 'hash' and kind ~= 'zset') then
  return {-1, kind}
end
local mode, owner
if kind == 'string' then
  mode, owner = 'setnx', redis.call('get', KEYS[1])
elseif kind == 'zset' then
  if not redis.call('zscore', KEYS[1], 'permits') then
    return {-1, 'sorted set that is not a semaphore'}
  end
  mode, owner = 'semaphore', (redis.call('zcard', KEYS[1]) - 1) .. ' permit holders'
else
  owner = redis.call('hget', KEYS[1], 'owner')
  if owner then
    mode = 'reentrant'
  else
    mode = redis.call('hget', KEYS[1], 'mode') or 'write'
    owner = redis.call('hget', KEYS[1], 'writer') or 'readers'
  end
end
-- A read/write lock's and a semaphore's helpers go with it (for any other mode they hold
-- nothing).
redis.call('del', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('del', KEYS[2])
redis.call('hset', KEYS[2], 'reason', ARGV[1], 'by', ARGV[2], 'at', string.format('%.0f', now),
  'mode', mode, 'previous', owner)
redis.call('pexpire', KEYS[2], ARGV[3])
-- Every waiter may try, whatever the mode: a forced unlock may free a semaphore's every
-- permit or let every reader in, and it is usually of a stuck holder with a long lease, past
-- which a waiter left asleep would sleep (a release of one holder wakes one waiter per
-- process). Rare, so waking them all costs nothing that matters. Best-effort, as every
-- release's (see setnx/release.lua): the lock is already removed.
redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1], 'all')
return {1, mode, owner}
