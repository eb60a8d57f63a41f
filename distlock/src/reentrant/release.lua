-- Give back one acquisition of the owner's hold; the last one deletes the lock and wakes a
-- waiter.
-- KEYS[1] lock key, whose string is also its wake-up channel (these modes publish on every
-- release, best-effort: see setnx/release.lua); ARGV[1] owner, ARGV[2] the acquisition's
-- nonce (ARGV[3], a wake-up id, is unused: these modes do not run on a quorum), ARGV[4] 's'
-- to publish with SPUBLISH (Redis Cluster); trailing empty arguments are left off.
-- Returns 1 when the acquisition was given back, 0 when it is not held here (expired, taken
-- over, or already given back by an earlier try of this release).
-- pcall: a key of another type is simply not ours, not a script failure.
if redis.pcall('hget', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
if redis.call('hdel', KEYS[1], 'h:' .. ARGV[2]) == 0 then
  return 0
end
-- Only 'owner' and 'fence' left: that was the last acquisition.
if redis.call('hlen', KEYS[1]) <= 2 then
  redis.call('del', KEYS[1])
  redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1], '')
end
return 1
