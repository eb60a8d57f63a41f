-- Give back one write acquisition. The last one wakes every waiter: any number of readers
-- may come in now. If the owner also holds the read lock (a downgrade), the lock stays
-- read-held by it.
-- KEYS[1] lock hash, whose string is also its wake-up channel, KEYS[2] readers, KEYS[3]
-- intents (all one slot; these modes publish on every release, best-effort: see
-- setnx/release.lua); ARGV[1] owner, ARGV[2] the acquisition's nonce (ARGV[3], a wake-up
-- id, is unused: these modes do not run on a quorum), ARGV[4] 's' to publish with SPUBLISH
-- (Redis Cluster); trailing empty arguments are left off.
-- Returns 1 when the acquisition was given back, 0 when it is not held here (expired, or
-- already given back by an earlier try of this release).
--
-- The same call is what a waiting writer that gives up (its wait ran out, or its future was
-- dropped) sends for the acquisition it never got: finding no hold, it withdraws the owner's
-- intent and wakes the waiters, so the readers the intent kept out come in at once instead
-- of sleeping until it lapses (nothing else announces that). An owner has one intent,
-- whichever of its acquisitions registered it; a release of an earlier tenure that comes
-- late may withdraw it too, and the waiting acquisition registers it again at its next
-- attempt.
local owner, nonce = ARGV[1], ARGV[2]
local now = server_ms()
local s = load(now, owner)
if not s then
  return 0
end
if s.writer ~= owner or not has(s.wholds, nonce) then
  if s.writer ~= owner and redis.call('zrem', INTENTS, owner) == 1 then
    settle(s, now)
    if not s.writer then
      redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', LOCK, 'all')
    end
  elseif s.dirty then
    settle(s, now)
  end
  return 0
end
local rest = without(s.wholds, nonce)
if rest ~= '' then
  redis.call('hset', LOCK, 'writer-holds', rest)
  return 1
end
s.writer = nil
if latest(READERS) <= now and (s.intents_until <= now or latest(INTENTS) <= now) then
  -- The last hold of all: nothing is left to keep.
  redis.call('del', LOCK, READERS, INTENTS)
else
  redis.call('hdel', LOCK, 'writer', 'writer-until', 'writer-fence', 'writer-holds',
    'writer-holder')
  prune(s, now)
  settle(s, now)
end
redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', LOCK, 'all')
return 1
