-- Renew the lease of every name of a set, only if every one still holds our token: a set is
-- held whole or not at all, and a renewal that finds one name lost prolongs none.
-- KEYS: the names' lock keys; ARGV[1] owner token, ARGV[2] ttl in milliseconds, ARGV[3] nonce
-- (unused).
-- Returns the shortest of the names' remaining leases after the renewal (at least the ttl),
-- or 0 when any name is not ours. A lease is never shortened (see setnx/extend.lua).
for i = 1, #KEYS do
  if redis.pcall('get', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
local ttl = tonumber(ARGV[2])
local least
for i = 1, #KEYS do
  local left = redis.call('pttl', KEYS[i])
  if left < ttl then
    redis.call('pexpire', KEYS[i], ARGV[2])
    left = ttl
  end
  if not least or left < least then
    least = left
  end
end
return least
