-- Renew the lease only if the lock still holds our token.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] ttl in milliseconds.
-- Returns 1 renewed, 0 not ours (expired, or taken by another owner).
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
