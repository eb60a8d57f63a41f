-- Give back one write acquisition. The last one wakes every waiter: any number of readers
-- may come in now. If the owner also holds the read lock (a downgrade), the lock stays
-- read-held by it.
-- KEYS[1] lock hash, whose string is also its wake-up channel (these modes publish on every
-- release, best-effort: see setnx/release.lua); ARGV[1] owner, ARGV[2] the acquisition's
-- nonce (ARGV[3], a wake-up id, is unused: these modes do not run on a quorum), ARGV[4] 's'
-- to publish with SPUBLISH (Redis Cluster); trailing empty arguments are left off.
-- Returns 1 when the acquisition was given back, 0 when it is not held here (expired, or
-- already given back by an earlier try of this release).
local owner, nonce = ARGV[1], ARGV[2]
local now = server_ms()
local s = load(now)
if not s then
  return 0
end
if s.writer ~= owner or not s.writes[nonce] then
  if s.dirty then
    settle(s, now)
  end
  return 0
end
s.writes[nonce] = nil
s.nwrites = s.nwrites - 1
if s.nwrites > 0 then
  redis.call('hdel', KEYS[1], 'w:' .. nonce)
  if s.dirty then
    settle(s, now)
  end
  return 1
end
redis.call('hdel', KEYS[1], 'writer', 'writer-until', 'writer-fence', 'w:' .. nonce)
s.writer = nil
settle(s, now)
redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1], 'all')
return 1
