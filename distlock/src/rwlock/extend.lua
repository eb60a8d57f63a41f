-- Renew the owner's holds, read and write alike (one owner is one task, whose holds live and
-- die together). Other readers' leases are left as they are: each expires on its own.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] ttl in ms.
-- Returns 1 renewed, 0 when the owner holds nothing live here (its lease is lost).
-- A lease is never shortened: another hold of the same owner may count on the longer one.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = server_ms()
local s = load(now)
if not s then
  return 0
end
local renewed = 0
if s.writer == owner then
  renewed = 1
  if now + ttl > s.wuntil then
    s.wuntil = now + ttl
    redis.call('hset', KEYS[1], 'writer-until', int(s.wuntil))
    s.dirty = true
  end
end
local r = s.readers[owner]
if r then
  renewed = 1
  if now + ttl > r.ends then
    r.ends = now + ttl
    redis.call('hset', KEYS[1], 'read-until:' .. owner, int(r.ends))
    s.dirty = true
  end
end
if s.dirty then
  settle(s, now)
end
return renewed
