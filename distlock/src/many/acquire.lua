-- Take every name of a set (`Client::lock_many`) or none. Each name is a setnx lock (its own
-- lock key holding the owner's token, with a `PX` lease), so a set excludes each of its
-- names' locks and each name's lock excludes the set. `fence.lua` and `held_as.lua` come
-- first.
-- KEYS: the n names' lock keys in the set's fixed order (see `key/set.rs`), then their n
-- fencing counters when ARGV[7] is '1', then their n waited-for marks when ARGV[8] is '1'.
-- ARGV as for setnx/acquire.lua: [1] owner token, [2] ttl in milliseconds, [3] the retry
-- flag, [4] want the holder's ttl, [5] nonce, [6] who takes it, [7] '1' to mint a fencing
-- token, [8] '1' when the caller waits: the busy name is then marked as waited for (for as
-- long as its holder's lease has left), so that its release publishes. [3] to [6] are
-- unused: the token is unique per acquisition, so a name holding it is this acquisition's
-- whatever the flag says, and the busy answer has the holder's ttl at no extra cost.
-- Returns {1, fencing token or -1 if not asked} when every name is held; {0, holder's
-- remaining ms, i} when the i-th name (from 1) is busy; {-1, type, i} or {-3, mode, i} when
-- the i-th name holds the application's data or another mode's lock.
-- All or nothing: unless every name is free or already this acquisition's, nothing is taken,
-- and the names an earlier attempt of this acquisition took are given back, waking their
-- waiters (its reply was lost, and one of its names ran out since, or another refused): when
-- this call answers anything but held, no name holds its token, and a set is never left held
-- in part.
local owner = ARGV[1]
local fencing = ARGV[7] == '1'
local waits = ARGV[8] == '1'
local n = #KEYS / (1 + (fencing and 1 or 0) + (waits and 1 or 0))
local marks = waits and n * (fencing and 2 or 1) or nil
-- Every name is looked at, even past the first that refuses: a later one may be this
-- acquisition's, to be given back.
local ours, refused, busy, busy_ttl = {}, nil, nil, nil
for i = 1, n do
  local held = redis.pcall('get', KEYS[i])
  if type(held) == 'table' then
    if not refused then
      refused = held_as(KEYS[i])
      refused[3] = i
    end
  elseif held == owner then
    ours[i] = true
  elseif held then
    local ttl = redis.call('pttl', KEYS[i])
    if ttl < 0 then
      -- Our locks always expire: a key without expiry is the application's own value.
      refused = refused or {-1, 'string without expiry', i}
    elseif not busy then
      busy, busy_ttl = i, ttl
    end
  end
end
local function give_back_ours()
  for i in pairs(ours) do
    give_back(KEYS[i], marks and KEYS[marks + i])
  end
end
if refused then
  give_back_ours()
  return refused
end
if busy then
  give_back_ours()
  if waits then
    redis.call('set', KEYS[marks + busy], '1', 'PX', int(math.max(busy_ttl, 1)))
  end
  return {0, busy_ttl, busy}
end
-- A token minted now, before any name is taken (a counter holding the application's data
-- then leaves nothing taken by this call), as on every path that hands one out, a retry's
-- too: the one an earlier attempt minted never reached the caller, and a counter may have
-- gone back since (deleted, expired, a restart), so reading the counters could hand out a
-- token below an earlier one. One token for the set (`fence.lua`'s `mint_set`).
local top = -1
if fencing then
  local counters = {}
  for i = 1, n do
    counters[i] = KEYS[n + i]
  end
  local bad, at
  top, bad, at = mint_set(counters)
  if not top then
    give_back_ours()
    return {-1, bad, at}
  end
end
local ttl = tonumber(ARGV[2])
for i = 1, n do
  if ours[i] then
    -- Taken by an earlier attempt whose reply was lost: the lease is made at least the ttl
    -- asked for, never shortened.
    if redis.call('pttl', KEYS[i]) < ttl then
      redis.call('pexpire', KEYS[i], ARGV[2])
    end
  else
    redis.call('set', KEYS[i], owner, 'PX', ARGV[2])
  end
end
return {1, top}
