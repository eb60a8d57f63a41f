-- Raise a node's fencing counter to at least the token just issued by a quorum acquisition.
-- Every later majority shares a node with this one; raising the counters of this majority to
-- the token makes that shared node's next INCR exceed it, so tokens keep increasing across
-- majorities whose counters had drifted apart (a node was down for some acquisitions).
-- KEYS[1] fencing counter; ARGV[1] the token. Returns the counter's value afterwards.
local token = tonumber(ARGV[1])
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < token then
  redis.call('set', KEYS[1], token)
  return token
end
return current
