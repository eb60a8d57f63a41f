-- Take or re-enter the read lock.
-- KEYS[1] lock hash, KEYS[2] readers, KEYS[3] intents, KEYS[4] fencing counter (all one
-- slot; the counter declared only when ARGV[7] is '1';
-- ARGV[8], the setnx lock's waits flag, is unused: these modes publish on every release)
-- ARGV[1] owner (client id : context), ARGV[2] ttl in ms, ARGV[5] the acquisition's nonce,
-- ARGV[7] '1' to return the fencing counter (not read otherwise);
-- ARGV[3] (retry) and ARGV[4] (want the holder's ttl) are unused: the nonce makes a retry
-- find its own hold, and the busy answer costs nothing extra here
-- Returns {1, fencing counter or -1 if not asked} when held, {0, ms} when busy, {-1, type} when a key holds
-- something that is not one of our locks, {-3, mode} when the name is held as a lock of
-- another mode.
--
-- Reads never increment the counter: readers share the lock, so a token that grows per
-- reader would order nothing. They get its current value, the latest write tenure's token.
local owner, ttl, nonce = ARGV[1], tonumber(ARGV[2]), ARGV[5]
local now = server_ms()
local s, refused = load(now, owner)
if not s then
  return refused
end
-- This acquisition retried after its reply was lost, re-entry by a reader, or the writer
-- taking the read lock too (the way to downgrade): all already exclude every other writer,
-- so waiting writers do not hold them up.
local intent_ends = not s.own and not s.writer and others_intend(s, owner, now)
if s.own or s.writer == owner or (not s.writer and not intent_ends) then
  local fence, bad = -1, nil
  if FENCING then
    fence, bad = current_fence()
  end
  if not fence then
    if s.dirty then
      settle(s, now)
    end
    return {-1, bad}
  end
  if has(s.own, nonce) then
    -- This acquisition retried after its reply was lost: the client measures the lease from
    -- the retry, so the server must renew it from now too (spec/: found by the rwlock model).
    renew_read(s, owner, now, ttl)
  else
    add_read(s, owner, nonce, now, ttl)
  end
  if s.dirty then
    settle(s, now)
  end
  return {1, fence}
end
if s.dirty then
  settle(s, now)
end
if s.writer then
  -- The writer's release wakes every waiter; until then its lease bounds the wait.
  return {0, s.wuntil - now}
end
-- Only waiting writers keep this reader out. Their release wakes this reader (as does a
-- writer that gives up: see write_release.lua), but a writer that died withdraws nothing and
-- publishes nothing: its intent lapses in silence. So the answer is when the first of the
-- others' intents ends, and the reader tries again then at the latest (finding it renewed by
-- a live writer, it is told the new end): one attempt per process per intent's life (2 s at
-- most) while writers wait, never a sleep to a lease that has ended.
return {0, math.max(1, intent_ends - now)}
