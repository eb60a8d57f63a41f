-- Give back one permit, and wake one waiter: one permit is free, so one waiter can use it.
-- The payload `permit` also has every waiter of a process whose attempt was in flight try
-- again (see `channels::PERMIT_FREED`): two permits freed together are for two waiters.
-- KEYS[1] the semaphore's sorted set, whose string is also its wake-up channel (published
-- best-effort on every release: see setnx/release.lua), KEYS[2] its permit slots (the
-- permit's slot is freed with it); ARGV[1] owner token, ARGV[2] nonce (unused: the token
-- names the acquisition; ARGV[3], a wake-up id, is unused too: a semaphore does not run on a
-- quorum), ARGV[4] 's' to publish with SPUBLISH (Redis Cluster); trailing empty arguments
-- are left off.
-- Returns 1 when the permit was given back, 0 when it is not held (its lease ended, or an
-- earlier try of this release gave it back). Other holders' permits are never touched.
local now = server_ms()
local limit = load(now)
if not limit then
  return 0
end
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('hdel', KEYS[2], ARGV[1])
settle(now)
redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1], 'permit')
return 1
