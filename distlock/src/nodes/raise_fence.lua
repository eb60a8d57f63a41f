-- Raise fencing counters to at least a token just issued: by a quorum acquisition on the nodes
-- of its majority, and by a set of names (`lock_many`) on the counters of every name whose
-- own token was lower.
-- Every later majority shares a node with this one; raising the counters of this majority to
-- the token makes that shared node's next INCR exceed it, so tokens keep increasing across
-- majorities whose counters had drifted apart (a node was down for some acquisitions). A
-- set's token goes with each of its names, so each name's next INCR must exceed it too.
-- `fence.lua` comes first.
-- KEYS the fencing counters (one per name); ARGV[1] the token, in decimal. Returns the least
-- counter's value afterwards. The token is written as the client sent it, never as a Lua
-- number (see fence.lua), and each counter's lifetime starts again either way: it was just
-- used.
local token = tonumber(ARGV[1])
local least
for i = 1, #KEYS do
  local current = tonumber(redis.call('get', KEYS[i]) or '0')
  if current < token then
    redis.call('set', KEYS[i], ARGV[1], 'PX', FENCE_KEPT_MS)
    current = token
  else
    redis.call('pexpire', KEYS[i], FENCE_KEPT_MS)
  end
  if not least or current < least then
    least = current
  end
end
return least
