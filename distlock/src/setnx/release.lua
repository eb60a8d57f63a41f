-- Delete the lock only if it still holds our token (seed 002's check-and-delete, atomic),
-- and wake a waiter if one may be listening.
-- KEYS[1] lock key; its wake-up channel and its waited-for mark (set by a waiter's busy
-- attempt, see acquire.lua) are KEYS[1] .. ':wake' and KEYS[1] .. ':waited', in its slot by
-- the hash tag. ARGV[1] owner token, ARGV[2] nonce (unused: the token names the acquisition),
-- ARGV[3] this release's wake-up id (a quorum client hears the release from several nodes and
-- counts it once), ARGV[4] 's' to publish with SPUBLISH (Redis Cluster: sharded pub/sub, heard
-- on the slot's shard only), ARGV[5] '1' to publish even without the mark (the releasing
-- client's own waiters listen: they queue behind its attempts and do not mark the lock
-- themselves). Trailing empty arguments are left off: a missing one reads as nil.
-- Returns 1 released, 0 not ours (or gone): a retried release answers 0 once the first went
-- through, and changes nothing.
-- Every uncontended cycle runs this, and each argument costs the server more than a Lua
-- concatenation (parsed, allocated, interned: 1,300-2,400 instructions each, callgrind), so
-- the keys derived from the lock key are made here rather than sent. The mark goes with the
-- lock in one DEL; only a release that found it publishes, so a lock nobody waited for costs
-- two calls (GET, DEL), not three.
-- pcall: a key of another type is simply not ours, not a script failure.
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  if redis.call('del', KEYS[1], KEYS[1] .. ':waited') > 1 or ARGV[5] == '1' then
    redis.call(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1] .. ':wake', ARGV[3] or '')
  end
  return 1
end
return 0
