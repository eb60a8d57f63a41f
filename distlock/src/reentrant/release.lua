-- Give back one level of the owner's hold; the last level deletes the lock and wakes a
-- waiter.
-- KEYS[1] lock key, KEYS[2] wake-up channel; ARGV[1] owner.
-- Returns 1 when a level was given back, 0 when the owner holds nothing here.
-- pcall: a key of another type is simply not ours, not a script failure.
if redis.pcall('hexists', KEYS[1], ARGV[1]) ~= 1 then
  return 0
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '')
end
return 1
