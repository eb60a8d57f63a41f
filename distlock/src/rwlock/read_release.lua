-- Give back one level of the owner's read hold. When the last reader leaves, wake waiters:
-- every one of them if writers registered intents (readers waiting behind those intents
-- share the channel, and a single wake-up could land on one of them instead of a writer),
-- else one.
-- KEYS[1] lock hash, KEYS[2] wake-up channel; ARGV[1] owner.
-- Returns 1 when a level was given back, 0 when the owner holds no live read hold here
-- (other readers' holds are never touched).
local owner = ARGV[1]
local now = server_ms()
local s = load(now)
if not s then
  return 0
end
local r = s.readers[owner]
if not r then
  if s.dirty then
    settle(s, now)
  end
  return 0
end
if r.count > 1 then
  r.count = redis.call('hincrby', KEYS[1], 'read:' .. owner, -1)
else
  redis.call('hdel', KEYS[1], 'read:' .. owner, 'read-until:' .. owner)
  s.readers[owner] = nil
  s.nreaders = s.nreaders - 1
end
settle(s, now)
if s.nreaders == 0 and not s.writer then
  redis.call('publish', KEYS[2], s.nintents > 0 and 'all' or '')
end
return 1
