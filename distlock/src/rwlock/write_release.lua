-- Give back one write acquisition, or withdraw the intent of a waiting writer that gives up
-- (the rule is `write.lua`'s `write_give`, which a write set applies to each of its names).
-- KEYS[1] lock hash, whose string is also its wake-up channel, KEYS[2] readers, KEYS[3]
-- intents (all one slot; these modes publish on every release, best-effort: see
-- setnx/release.lua); ARGV[1] owner, ARGV[2] the acquisition's nonce (ARGV[3], a wake-up
-- id, is unused: these modes do not run on a quorum), ARGV[4] 's' to publish with SPUBLISH
-- (Redis Cluster); trailing empty arguments are left off.
-- Returns 1 when the acquisition was given back, 0 when it is not held here (expired, or
-- already given back by an earlier try of this release).
local owner, nonce = ARGV[1], ARGV[2]
local now = server_ms()
local s = load(now, owner)
if not s then
  return 0
end
return write_give(s, owner, nonce, now, ARGV[4])
