-- Renew the lease while the owner still holds the lock.
-- KEYS[1] lock key; ARGV[1] owner, ARGV[2] ttl in milliseconds.
-- Returns 1 renewed, 0 not held by this owner.
if redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
