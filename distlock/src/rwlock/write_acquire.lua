-- Take or re-enter the write lock; a writer that has to wait registers its intent, which
-- keeps new readers out until it got its turn (writer preference).
-- KEYS[1] lock hash, KEYS[2] fencing counter (same slot; declared only when ARGV[7] is '1';
-- ARGV[8] '1' when the caller waits: only then does a busy answer register its intent)
-- ARGV[1] owner (client id : context), ARGV[2] ttl in ms, ARGV[5] the acquisition's nonce,
-- ARGV[6] who takes it (the value of its `w:` field, for inspection; never compared),
-- ARGV[7] '1' to mint a fencing token (a tenure taken without one mints it at the first
-- re-entry that asks);
-- ARGV[3] (retry) and ARGV[4] (want the holder's ttl) are unused: the nonce makes a retry
-- find its own hold
-- Returns {1, fencing token or -1 if not asked} when held, {0, ms until the next attempt at the latest} when busy,
-- {-1, type} when a key holds something that is not one of our locks, {-2, 'upgrade'} when
-- the owner holds only the read lock (refused for good: see below), {-3, mode} when the name
-- is held as a lock of another mode.
local owner, ttl, nonce, holder = ARGV[1], tonumber(ARGV[2]), ARGV[5], ARGV[6]
local now, now_us = server_ms()
local s, refused = load(now)
if not s then
  return refused
end
if s.writer == owner then
  -- Re-entry (or this acquisition retried) keeps the tenure's token and never shortens the
  -- lease.
  if not s.writes[nonce] then
    redis.call('hset', KEYS[1], 'w:' .. nonce, holder)
    s.writes[nonce] = true
    s.nwrites = s.nwrites + 1
  end
  if now + ttl > s.wuntil then
    s.wuntil = now + ttl
    redis.call('hset', KEYS[1], 'writer-until', int(s.wuntil))
  end
  if FENCING and s.wfence < 0 then
    -- The tenure was taken without a token and this acquisition asks for one: mint it now
    -- (the owner holds the lock, so it orders after every earlier tenure's).
    local fence, bad = mint(KEYS[2], now_us)
    if not fence then
      settle(s, now)
      return {-1, bad}
    end
    s.wfence = fence
    redis.call('hset', KEYS[1], 'writer-fence', int(fence))
  end
  settle(s, now)
  if not FENCING then
    return {1, -1}
  end
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
  local fence, bad = -1, nil
  if FENCING then
    fence, bad = mint(KEYS[2], now_us)
  end
  if not fence then
    -- The counter key holds the application's data; no hold was written.
    if s.dirty then
      settle(s, now)
    end
    return {-1, bad}
  end
  s.writer, s.wuntil, s.wfence = owner, now + ttl, fence
  s.writes[nonce] = true
  s.nwrites = 1
  redis.call('hset', KEYS[1], 'writer', owner, 'writer-until', int(s.wuntil),
    'writer-fence', fence < 0 and '' or int(fence), 'w:' .. nonce, holder)
  if s.intents[owner] then
    redis.call('hdel', KEYS[1], 'intent:' .. owner)
    s.intents[owner] = nil
    s.nintents = s.nintents - 1
  end
  settle(s, now)
  if not FENCING then
    return {1, -1}
  end
  return {1, fence}
end
-- Busy. A writer that waits (re)registers its intent, which must outlive the gap until its
-- next attempt, so the answer tells it to come back within a third of it. A single try
-- registers none: it does not come back, and its intent would only keep new readers out,
-- with no release to wake them when it lapses.
local intent_ms = math.min(ttl, INTENT_MAX_MS)
if ARGV[8] == '1' then
  s.intents[owner] = now + intent_ms
  s.nintents = s.nintents + 1
  redis.call('hset', KEYS[1], 'intent:' .. owner, int(now + intent_ms))
  settle(s, now)
elseif s.dirty then
  settle(s, now)
end
local free_at = s.writer and s.wuntil or readers_until(s)
return {0, math.max(1, math.min(free_at - now, math.floor(intent_ms / 3)))}
