-- Give back one level of the owner's write hold. The last level wakes every waiter: any
-- number of readers may come in now. If the owner also holds the read lock (a downgrade),
-- the lock stays read-held by it.
-- KEYS[1] lock hash, KEYS[2] wake-up channel; ARGV[1] owner.
-- Returns 1 when a level was given back, 0 when the owner does not hold the write lock.
local owner = ARGV[1]
local now = server_ms()
local s = load(now)
if not s then
  return 0
end
if s.writer ~= owner then
  if s.dirty then
    settle(s, now)
  end
  return 0
end
if s.wcount > 1 then
  redis.call('hincrby', KEYS[1], 'writer-count', -1)
  if s.dirty then
    settle(s, now)
  end
  return 1
end
redis.call('hdel', KEYS[1], 'writer', 'writer-count', 'writer-until', 'writer-fence')
s.writer = nil
settle(s, now)
redis.call('publish', KEYS[2], 'all')
return 1
