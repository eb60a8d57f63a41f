-- Renew one permit's lease; the other holders' leases are left as they are: each expires on
-- its own.
-- KEYS[1] the semaphore's sorted set, KEYS[2] its permit slots (a fenced permit keeps its
-- slot while its lease lasts: only the keys' expiry changes there); ARGV[1] owner token,
-- ARGV[2] ttl in ms, ARGV[3] nonce (unused).
-- Returns the lease's remaining ms after the renewal (at least the ttl), or 0 when the
-- permit is not held (its lease is lost). A lease is never shortened.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = server_ms()
if not load(now) then
  return 0
end
local ends = tonumber(redis.call('zscore', KEYS[1], owner))
if not ends then
  return 0
end
if ends < now + ttl then
  ends = now + ttl
  redis.call('zadd', KEYS[1], int(ends), owner)
  settle(now)
end
return ends - now
