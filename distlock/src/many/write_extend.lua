-- Renew the write lease of every name of a write set, only if every one still holds this
-- acquisition: a set is held whole or not at all, and a renewal that finds one name lost
-- prolongs none. `fence.lua`, `rwlock/prelude.lua`, `rwlock/write.lua` and `write_head.lua`
-- come first.
-- KEYS: see `write_head.lua`. ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] the acquisition's
-- nonce.
-- Returns the shortest of the names' remaining leases after the renewal (at least the ttl),
-- or 0 when any name is not held. A lease is never shortened (`renew_write`).
local owner, ttl, nonce = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = server_ms()
local states = {}
for i = 1, SET_SIZE do
  point(i)
  local s = load(now, owner)
  if not s or s.writer ~= owner or not has(s.wholds, nonce) then
    -- A state the load changed (a writer whose lease ended) is settled as a single
    -- renewal would.
    if s and s.dirty then
      settle(s, now)
    end
    return 0
  end
  states[i] = s
end
local least = nil
for i = 1, SET_SIZE do
  point(i)
  local s = states[i]
  -- Renewals clear expired readers too (see rwlock/extend.lua).
  prune(s, now, true)
  local left = renew_write(s, now, ttl) - now
  if not least or left < least then
    least = left
  end
end
return least
