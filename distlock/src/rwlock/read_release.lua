-- Give back one read acquisition. When the last reader leaves, wake a waiter: a writer
-- (`writer`, which no reader acts on) if writers registered intents, since the readers
-- waiting behind those intents stay out until the writer has had its turn (its release
-- wakes them all) or withdrawn (so does that); else any one.
-- KEYS[1] lock hash, whose string is also its wake-up channel, KEYS[2] readers, KEYS[3]
-- intents (all one slot; these modes publish on every release, best-effort: see
-- setnx/release.lua); ARGV[1] owner, ARGV[2] the acquisition's nonce (ARGV[3], a wake-up
-- id, is unused: these modes do not run on a quorum), ARGV[4] 's' to publish with SPUBLISH
-- (Redis Cluster); trailing empty arguments are left off.
-- Returns 1 when the acquisition was given back, 0 when it is not held here (expired, or
-- already given back by an earlier try of this release). Other readers' holds are never
-- touched.
local owner, nonce = ARGV[1], ARGV[2]
local now = server_ms()
local s = load(now, owner)
if not s then
  return 0
end
if not has(s.own, nonce) then
  if s.dirty then
    settle(s, now)
  end
  return 0
end
local rest = without(s.own, nonce)
if rest ~= '' then
  -- The owner reads on with its other holds: its lease, and so the lock, stays as it is.
  redis.call('hset', LOCK, 'r:' .. owner, rest)
  if s.dirty then
    settle(s, now)
  end
  return 1
end
redis.call('hdel', LOCK, 'r:' .. owner, 'r-until:' .. owner)
redis.call('zrem', READERS, owner)
-- Expired readers are left to the acquisitions and renewals (`prune`): every reader is
-- added by one.
settle(s, now, s.ends)
if s.readers_until <= now and not s.writer then
  local intents_until = s.intents_until
  if intents_until > now and not s.intents_exact then
    intents_until = latest(INTENTS)
  end
  redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', LOCK,
    intents_until > now and 'writer' or '')
end
return 1
