-- Delete the lock only if it still holds our token (seed 002's check-and-delete, atomic),
-- and wake a waiter.
-- KEYS[1] lock key, KEYS[2] wake-up channel; ARGV[1] owner token, ARGV[2] nonce (unused: the
-- token names the acquisition), ARGV[3] this release's wake-up id (a quorum client hears the
-- release from several nodes and counts it once; empty on a single node), ARGV[4] 's' to
-- publish with SPUBLISH (Redis Cluster: sharded pub/sub, heard on the slot's shard only).
-- Returns 1 released, 0 not ours (or gone): a retried release answers 0 once the first went
-- through, and changes nothing.
-- pcall: a key of another type is simply not ours, not a script failure.
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[2], ARGV[3])
  return 1
end
return 0
