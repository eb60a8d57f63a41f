-- Renew the lease only if the lock still holds our token.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] ttl in milliseconds, ARGV[3] nonce (unused).
-- Returns the lease's remaining milliseconds after the renewal (at least the ttl), or 0 when
-- the lock is not ours (expired, or taken by another owner).
-- The lease is never shortened, and the caller learns what the server holds: a guard that
-- believed a longer lease than the server's would call itself held after the key expired.
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  local left = redis.call('pttl', KEYS[1])
  local ttl = tonumber(ARGV[2])
  if left < ttl then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return ttl
  end
  return left
end
return 0
