-- Delete the lock only if it still holds our token (seed 002's check-and-delete, atomic),
-- and wake a waiter if one may be listening.
-- KEYS[1] lock key (its string is also its wake-up channel), KEYS[2] its waited-for mark (set
-- by a waiter's busy attempt, see acquire.lua; same slot). ARGV[1] owner token, ARGV[2] nonce
-- (unused: the token names the acquisition), ARGV[3] this release's wake-up id (a quorum
-- client hears the release from several nodes and counts it once), ARGV[4] 's' to publish
-- with SPUBLISH (Redis Cluster: sharded pub/sub, heard on the slot's shard only), ARGV[5] '1'
-- to publish even without the mark (the releasing client's own waiters listen: they queue
-- behind its attempts and do not mark the lock themselves). Trailing empty arguments are left
-- off: a missing one reads as nil.
-- Returns 1 released, 0 not ours (or gone): a retried release answers 0 once the first went
-- through, and changes nothing.
-- Every uncontended cycle runs this, and each argument costs the server more than a Lua
-- concatenation (parsed, allocated, interned: 1,300-2,400 instructions each, callgrind), so
-- the channel is a string the script already has. The mark goes with the lock in one DEL; only
-- a release that found it publishes, so a lock nobody waited for costs two calls (GET, DEL),
-- not three.
-- pcall: a key of another type is simply not ours, not a script failure; and a publish the
-- server refuses (SPUBLISH is unknown to a Redis 6 Cluster) must not turn a lock already freed
-- into a failed release: waiters that hear nothing try again by their bounded fallback.
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  if redis.call('del', KEYS[1], KEYS[2]) > 1 or ARGV[5] == '1' then
    redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1], ARGV[3] or '')
  end
  return 1
end
return 0
