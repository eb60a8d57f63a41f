-- Take or re-enter the write lock; a writer that has to wait registers its intent, which
-- keeps new readers out until it got its turn (writer preference). The rule is `write.lua`'s,
-- which a write set (`many/write_acquire.lua`) applies to each of its names.
-- KEYS[1] lock hash, KEYS[2] readers, KEYS[3] intents, KEYS[4] fencing counter (all one
-- slot; the counter declared only when ARGV[7] is '1';
-- ARGV[8] '1' when the caller waits: only then does a busy answer register its intent)
-- ARGV[1] owner (client id : context), ARGV[2] ttl in ms, ARGV[5] the acquisition's nonce,
-- ARGV[6] who takes it (kept as `writer-holder` for the tenure's first, for inspection; never
-- compared),
-- ARGV[7] '1' to mint a fencing token (a tenure taken without one mints it at the first
-- re-entry that asks);
-- ARGV[3] (retry) and ARGV[4] (want the holder's ttl) are unused: the nonce makes a retry
-- find its own hold
-- Returns {1, fencing token or -1 if not asked} when held, {0, ms until the next attempt at the latest} when busy,
-- {-1, type} when a key holds something that is not one of our locks, {-2, 'upgrade'} when
-- the owner holds only the read lock (refused for good: see `write_finds`), {-3, mode} when
-- the name is held as a lock of another mode.
local owner, ttl, nonce, holder = ARGV[1], tonumber(ARGV[2]), ARGV[5], ARGV[6]
local now, now_us = server_ms()
local s, refused = load(now, owner)
if not s then
  return refused
end
local found, free_at = write_finds(s, owner, now)
if found == 'ours' then
  -- Re-entry (or this acquisition retried) keeps the tenure's token and never shortens the
  -- lease. A tenure taken without a token, asked for one now, mints it (the owner holds the
  -- lock, so it orders after every earlier tenure's).
  local fence = nil
  if FENCING and s.wfence < 0 then
    local bad
    fence, bad = mint(FENCE, now_us)
    if not fence then
      return {-1, bad}
    end
  end
  local token = write_reenter(s, nonce, now, ttl, fence)
  return {1, FENCING and token or -1}
end
if found == 'upgrade' then
  if s.dirty then
    settle(s, now)
  end
  return {-2, 'upgrade'}
end
if found == 'free' then
  local fence, bad = -1, nil
  if FENCING then
    fence, bad = mint(FENCE, now_us)
  end
  if not fence then
    -- The counter key holds the application's data; no hold was written.
    if s.dirty then
      settle(s, now)
    end
    return {-1, bad}
  end
  write_take(s, owner, nonce, holder, now, ttl, fence)
  return {1, fence}
end
-- Busy: come back within a third of the intent's life (the wake-up on release usually
-- brings the writer back much sooner), or when the lock frees, whichever is first.
local back = write_intent(s, owner, now, ttl, ARGV[8] == '1')
return {0, math.max(1, math.min(free_at - now, back))}
