-- Take or re-enter the write lock; a writer that has to wait registers its intent, which
-- keeps new readers out until it got its turn (writer preference).
-- KEYS[1] lock hash, KEYS[2] fencing counter (same slot)
-- ARGV[1] owner (client id : task), ARGV[2] ttl in ms; ARGV[3] (retry) and ARGV[4] (want the
-- holder's ttl) are unused: re-entry already accepts a hold the owner has
-- Returns {1, fencing token} when held, {0, ms until the next attempt at the latest} when busy,
-- {-1, type} when a key holds something that is not one of our locks, {-2, 'upgrade'} when
-- the owner holds only the read lock (refused for good: see below).
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = server_ms()
local s, found = load(now)
if not s then
  return {-1, found}
end
if s.writer == owner then
  -- Re-entry keeps the tenure's token and never shortens the lease.
  s.wcount = redis.call('hincrby', KEYS[1], 'writer-count', 1)
  if now + ttl > s.wuntil then
    s.wuntil = now + ttl
    redis.call('hset', KEYS[1], 'writer-until', int(s.wuntil))
  end
  settle(s, now)
  return {1, s.wfence}
end
if s.readers[owner] then
  -- Upgrading cannot be allowed to wait: two readers upgrading would each wait for the other
  -- to leave, forever. Refuse at once instead (Redisson's read lock deadlocks here).
  if s.dirty then
    settle(s, now)
  end
  return {-2, 'upgrade'}
end
if not s.writer and s.nreaders == 0 then
  local fence = redis.pcall('incr', KEYS[2])
  if type(fence) == 'table' then
    -- The counter key holds the application's data; no hold was written.
    if s.dirty then
      settle(s, now)
    end
    return {-1, redis.call('type', KEYS[2]).ok .. ' at its fencing counter'}
  end
  s.writer, s.wcount, s.wuntil, s.wfence = owner, 1, now + ttl, fence
  redis.call('hset', KEYS[1], 'writer', owner, 'writer-count', 1,
    'writer-until', int(s.wuntil), 'writer-fence', fence)
  if s.intents[owner] then
    redis.call('hdel', KEYS[1], 'intent:' .. owner)
    s.intents[owner] = nil
    s.nintents = s.nintents - 1
  end
  settle(s, now)
  return {1, fence}
end
-- Busy: (re)register the intent. It must outlive the gap until this writer's next attempt,
-- so the answer tells the writer to come back within a third of it.
local intent_ms = math.min(ttl, INTENT_MAX_MS)
s.intents[owner] = now + intent_ms
s.nintents = s.nintents + 1
redis.call('hset', KEYS[1], 'intent:' .. owner, int(now + intent_ms))
settle(s, now)
local free_at = s.writer and s.wuntil or readers_until(s)
return {0, math.max(1, math.min(free_at - now, math.floor(intent_ms / 3)))}
