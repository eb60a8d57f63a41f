-- Take every name of a write set (`Client::write_many`) on its read/write lock's write side,
-- or none: each name as `write(name)` would take it (`write.lua`'s rule), so the set excludes
-- each name's readers and writers, and they exclude the set. `fence.lua`,
-- `rwlock/prelude.lua`, `rwlock/write.lua` and `write_head.lua` come first.
-- KEYS: see `write_head.lua`. ARGV as for rwlock/write_acquire.lua: [1] owner (client id :
-- context), [2] ttl in ms, [5] the acquisition's nonce, [6] who takes it, [7] '1' to mint a
-- fencing token, [8] '1' when the caller waits; [3] and [4] unused.
-- Returns {1, fencing token or -1 if not asked} when every name is held; {0, ms until the
-- next attempt at the latest, i} when the i-th name (from 1) is busy (the first one found);
-- {-1, type, i}, {-2, 'upgrade', i} or {-3, mode, i} when the i-th name holds the
-- application's data, is held by this owner as a reader only, or is held in another mode.
--
-- All or nothing: unless every name is free or already this owner's writer, nothing is
-- taken, and the names an earlier attempt of this acquisition took (its reply was lost) are
-- given back, waking their waiters. A name this owner held as a writer before (an outer
-- `write(name)` of the same task) is re-entered, as `write(name)` would, and keeps its
-- tenure's token; the set's own token is one for the whole set, above every earlier token of
-- each name (`mint_set`).
--
-- A set that waits is a waiting writer on every name it does not hold: each busy answer
-- (re)registers the owner's intent on each of them, free ones included, so new readers of
-- none of its names get in before it (writer preference, as for one name: a stream of
-- readers on any one name cannot starve the set; the price is that, while a set waits, new
-- readers of all its names wait too). Intents keep readers out, never writers: writers,
-- sets or single, are not ordered among themselves.
local owner, ttl, nonce, holder = ARGV[1], tonumber(ARGV[2]), ARGV[5], ARGV[6]
local waits = ARGV[8] == '1'
local now, now_us = server_ms()
-- Every name is looked at, even past the first that refuses: a later one may hold this
-- acquisition, to be given back.
local states, found, refused, busy, busy_at = {}, {}, nil, nil, nil
for i = 1, SET_SIZE do
  point(i)
  local s, refusal = load(now, owner)
  if not s then
    if not refused then
      refused = {refusal[1], refusal[2], i}
    end
  else
    states[i] = s
    local what, free_at = write_finds(s, owner, now)
    found[i] = what
    if what == 'upgrade' and not refused then
      refused = {-2, 'upgrade', i}
    elseif what == 'busy' and not busy then
      busy, busy_at = i, free_at
    end
  end
end
-- This acquisition's own holds (an earlier attempt's, whose reply was lost) go back, and the
-- states loaded above are settled. Returns which names it gave back.
local function give_back_ours()
  local given = {}
  for i = 1, SET_SIZE do
    local s = states[i]
    if s then
      point(i)
      if found[i] == 'ours' and has(s.wholds, nonce) then
        write_give(s, owner, nonce, now, 'both')
        given[i] = true
      elseif s.dirty then
        settle(s, now)
        s.dirty = false
      end
    end
  end
  return given
end
if refused then
  give_back_ours()
  return refused
end
if busy then
  local given = give_back_ours()
  local back = nil
  for i = 1, SET_SIZE do
    point(i)
    local s = states[i]
    if given[i] then
      -- Given back just now, maybe with its keys: read again.
      s = load(now, owner)
    end
    if s and s.writer ~= owner then
      local within = write_intent(s, owner, now, ttl, waits)
      back = back or within
    end
  end
  back = back or math.floor(math.min(ttl, INTENT_MAX_MS) / 3)
  return {0, math.max(1, math.min(busy_at - now, back)), busy}
end
local fence = -1
if FENCING then
  local counters = {}
  for i = 1, SET_SIZE do
    counters[i] = KEYS[3 * SET_SIZE + i]
  end
  local bad, at
  fence, bad, at = mint_set(counters, now_us)
  if not fence then
    -- A counter holds the application's data: nothing was taken by this call.
    give_back_ours()
    return {-1, bad, at}
  end
end
for i = 1, SET_SIZE do
  point(i)
  local s = states[i]
  if found[i] == 'ours' then
    if fence >= 0 and s.wholds == nonce then
      -- The tenure is this acquisition's alone (an earlier attempt took it, its reply lost):
      -- its token is the one handed out now.
      s.wfence = -1
    end
    write_reenter(s, nonce, now, ttl, fence >= 0 and fence or nil)
  else
    write_take(s, owner, nonce, holder, now, ttl, fence)
  end
end
return {1, fence}
