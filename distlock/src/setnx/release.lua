-- Delete the lock only if it still holds our token (seed 002's check-and-delete, atomic),
-- and wake a waiter if one may be listening.
-- KEYS[1] lock key, KEYS[2] wake-up channel, KEYS[3] the lock's waited-for mark (same slot;
-- set by a waiter's busy attempt, see acquire.lua); ARGV[1] owner token, ARGV[2] nonce
-- (unused: the token names the acquisition), ARGV[3] this release's wake-up id (a quorum
-- client hears the release from several nodes and counts it once; empty on a single node),
-- ARGV[4] 's' to publish with SPUBLISH (Redis Cluster: sharded pub/sub, heard on the slot's
-- shard only), ARGV[5] '1' to publish even without the mark (the releasing client's own
-- waiters listen: they queue behind its attempts and do not mark the lock themselves).
-- Returns 1 released, 0 not ours (or gone): a retried release answers 0 once the first went
-- through, and changes nothing.
-- The mark goes with the lock in one DEL; only a release that found it publishes, so a lock
-- nobody waited for costs two calls (GET, DEL), not three.
-- pcall: a key of another type is simply not ours, not a script failure.
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  if redis.call('del', KEYS[1], KEYS[3]) > 1 or ARGV[5] == '1' then
    redis.call(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[2], ARGV[3])
  end
  return 1
end
return 0
