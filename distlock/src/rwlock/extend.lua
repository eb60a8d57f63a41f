-- Renew the lease of one acquisition: the writer's lease for a write acquisition, the
-- owner's read lease for a read one. Other owners' leases are left as they are: each expires
-- on its own.
-- KEYS[1] lock hash, KEYS[2] readers, KEYS[3] intents (all one slot); ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] the acquisition's nonce.
-- Returns the lease's remaining ms after the renewal (at least the ttl), or 0 when the
-- acquisition is not held here (its lease is lost). A lease is never shortened: another hold
-- of the same owner may count on the longer one.
local owner, ttl, nonce = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = server_ms()
local s = load(now, owner)
if not s then
  return 0
end
local left = 0
-- Renewals clear expired readers too: holders that keep renewing while others crash would
-- otherwise keep the crashed ones' entries until the lock is given up.
prune(s, now, true)
if s.writer == owner and has(s.wholds, nonce) then
  left = renew_write(s, now, ttl) - now
elseif has(s.own, nonce) then
  left = renew_read(s, owner, now, ttl) - now
end
if s.dirty then
  settle(s, now)
end
return left
