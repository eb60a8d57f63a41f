-- Raise a node's fencing counter to at least the token just issued by a quorum acquisition.
-- Every later majority shares a node with this one; raising the counters of this majority to
-- the token makes that shared node's next INCR exceed it, so tokens keep increasing across
-- majorities whose counters had drifted apart (a node was down for some acquisitions).
-- `fence.lua` comes first.
-- KEYS[1] fencing counter; ARGV[1] the token, in decimal. Returns the counter's value
-- afterwards. The token is written as the client sent it, never as a Lua number (see
-- fence.lua), and the counter's lifetime starts again either way: it was just used.
local token = tonumber(ARGV[1])
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < token then
  redis.call('set', KEYS[1], ARGV[1], 'PX', FENCE_KEPT_MS)
  return token
end
redis.call('pexpire', KEYS[1], FENCE_KEPT_MS)
return current
