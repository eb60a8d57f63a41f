-- Delete the lock only if it still holds our token (seed 002's check-and-delete, atomic).
-- KEYS[1] lock key; ARGV[1] owner token. Returns 1 released, 0 not ours (or gone).
-- pcall: a key of another type is simply not ours, not a script failure.
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
