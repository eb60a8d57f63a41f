-- Take or re-enter the write lock; a writer that has to wait registers its intent, which
-- keeps new readers out until it got its turn (writer preference).
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
-- the owner holds only the read lock (refused for good: see below), {-3, mode} when the name
-- is held as a lock of another mode.
local owner, ttl, nonce, holder = ARGV[1], tonumber(ARGV[2]), ARGV[5], ARGV[6]
local now, now_us = server_ms()
local s, refused = load(now, owner)
if not s then
  return refused
end
if s.writer == owner then
  -- Re-entry (or this acquisition retried) keeps the tenure's token and never shortens the
  -- lease.
  local fields, ends = {}, nil
  if FENCING and s.wfence < 0 then
    -- The tenure was taken without a token and this acquisition asks for one: mint it now
    -- (the owner holds the lock, so it orders after every earlier tenure's).
    local fence, bad = mint(FENCE, now_us)
    if not fence then
      return {-1, bad}
    end
    s.wfence = fence
    fields = {'writer-fence', int(fence)}
  end
  if not has(s.wholds, nonce) then
    s.wholds = s.wholds .. ' ' .. nonce
    fields[#fields + 1] = 'writer-holds'
    fields[#fields + 1] = s.wholds
  end
  if now + ttl > s.wuntil then
    s.wuntil, ends = now + ttl, now + ttl
    fields[#fields + 1] = 'writer-until'
    fields[#fields + 1] = int(s.wuntil)
  end
  write(s, now, fields, ends)
  if not FENCING then
    return {1, -1}
  end
  return {1, s.wfence}
end
if s.own then
  -- Upgrading cannot be allowed to wait: two readers upgrading would each wait for the other
  -- to leave, forever. Refuse at once instead (Redisson's read lock deadlocks here).
  if s.dirty then
    settle(s, now)
  end
  return {-2, 'upgrade'}
end
local readers_until = (s.writer or s.fresh) and 0 or latest(READERS)
if not s.writer and readers_until <= now then
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
  s.writer, s.wuntil, s.wfence, s.wholds = owner, now + ttl, fence, nonce
  s.mode = 'write'
  local fields = {'mode', 'write', 'writer', owner, 'writer-until', int(s.wuntil),
    'writer-fence', fence < 0 and '' or int(fence), 'writer-holds', nonce,
    'writer-holder', holder}
  if s.fresh then
    fields[#fields + 1] = 'rwlock-layout'
    fields[#fields + 1] = '3'
  else
    prune(s, now)
    if s.intents_until > now then
      -- Its own intent, if it registered one, has had its turn.
      redis.call('zrem', INTENTS, owner)
    end
  end
  write(s, now, fields, s.wuntil)
  if not FENCING then
    return {1, -1}
  end
  return {1, fence}
end
-- Busy. A writer that waits (re)registers its intent, which must outlive the gap until its
-- next attempt, so the answer tells it to come back within a third of it. A single try
-- registers none: it does not come back, and its intent would only keep new readers out.
-- (A waiter that gives up withdraws its intent with its release call: write_release.lua.)
-- The summary `intents-until` is set past the intent by as much again, so a writer's
-- attempts rewrite it once per intent length, not each time; readers that find no live
-- intent behind it bring it down.
local intent_ms = math.min(ttl, INTENT_MAX_MS)
if ARGV[8] == '1' then
  local ends = now + intent_ms
  local created = redis.call('zadd', INTENTS, int(ends), owner, '0', KEEP) == 2
  if ends > s.intents_until then
    s.intents_until, s.intents_changed = ends + intent_ms, true
  end
  write(s, now, {}, ends, created and INTENTS)
end
if s.dirty then
  settle(s, now)
end
local free_at = s.writer and s.wuntil or readers_until
return {0, math.max(1, math.min(free_at - now, math.floor(intent_ms / 3)))}
