-- Renew the lease while this acquisition is still held.
-- KEYS[1] lock key; ARGV[1] owner, ARGV[2] ttl in milliseconds, ARGV[3] the acquisition's nonce.
-- Returns the lease's remaining milliseconds after the renewal (at least the ttl), or 0 when
-- the acquisition is not held here. One expiry serves every acquisition of the owner, so it
-- is never shortened: an outer hold with a longer ttl may count on it.
if redis.pcall('hget', KEYS[1], 'owner') == ARGV[1]
    and redis.call('hexists', KEYS[1], 'h:' .. ARGV[3]) == 1 then
  local left = redis.call('pttl', KEYS[1])
  local ttl = tonumber(ARGV[2])
  if left < ttl then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return ttl
  end
  return left
end
return 0
