-- Take one permit of the semaphore, or answer busy while every permit is held.
-- KEYS[1] the semaphore's sorted set, KEYS[2] its permit slots, KEYS[3] its fencing counter
-- (all one Cluster slot; KEYS[3] declared only when ARGV[7] is '1')
-- ARGV[1] owner token (one per acquisition), ARGV[2] ttl in ms, ARGV[7] '1' to mint a
-- fencing token and take a permit slot, ARGV[8] the setnx lock's waits flag (unused: every
-- release publishes; sent here only so that ARGV[9] has its place), ARGV[9] the number of
-- permits the caller asks the semaphore to have;
-- ARGV[3] (retry), ARGV[4] (want the holder's ttl), ARGV[5] (nonce) and ARGV[6] (holder)
-- are unused: the token is unique per acquisition and carries who took it, so a retry
-- finds its own permit, and the busy answer costs nothing extra
-- Returns {1, -1} when held without fencing, {1, fencing token, permit slot} when held with
-- it, {0, ms until the first permit's lease ends} when busy, {-1, type} when a key holds
-- something that is not one of our locks, {-3, mode} when the name is held as a lock of
-- another mode, {-4, recorded, asked} when the holders recorded another number of permits
-- (refused: the limit is never changed while a permit is held).
-- The permit slot of a fenced acquisition by `owner` (`mine`: it holds a permit already, an
-- earlier try whose reply was lost) on a semaphore of `n` permits: the slot it holds already,
-- else the lowest that no live fenced permit holds. One is always free: the caller found
-- fewer than `n` permits held. Stale fields (their permit's lease ended) are removed here.
local function take_slot(owner, mine, n)
  local fields = redis.call('hgetall', KEYS[2])
  local held = {}
  for i = 1, #fields, 2 do
    local holder, slot = fields[i], tonumber(fields[i + 1])
    if holder == owner and mine and slot then
      return slot
    end
    if holder ~= owner and slot and redis.call('zscore', KEYS[1], holder) then
      held[slot] = true
    else
      redis.call('hdel', KEYS[2], holder)
    end
  end
  for slot = 0, n - 1 do
    if not held[slot] then
      return slot
    end
  end
end

local owner, ttl, asked = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[9])
local now, now_us = server_ms()
local limit, refused = load(now)
if refused then
  return refused
end
if limit and limit ~= asked then
  return {-4, limit, asked}
end
local mine = limit and tonumber(redis.call('zscore', KEYS[1], owner))
if limit and not mine and redis.call('zcard', KEYS[1]) - 1 >= limit then
  local first = redis.call('zrange', KEYS[1], '1', '1', 'withscores')
  return {0, math.max(1, tonumber(first[2]) - now)}
end
local fence, slot = -1, nil
if ARGV[7] == '1' then
  slot = take_slot(owner, mine, limit or asked)
  local bad
  fence, bad = mint(KEYS[3], now_us)
  if not fence then
    -- The counter key holds the application's data; no permit was written.
    return {-1, bad}
  end
end
-- A retry that finds its own permit (its earlier reply was lost) renews it from now, as the
-- client measures the lease from the retry; a lease is never shortened. A fenced retry gets
-- a token of its own: the one minted before never reached the caller.
local ends = now + ttl
if mine and mine > ends then
  ends = mine
end
redis.call('zadd', KEYS[1], int(ends), owner)
if not limit then
  redis.call('zadd', KEYS[1], int(-asked), LIMIT)
end
if slot then
  redis.call('hset', KEYS[2], owner, int(slot))
end
settle(now)
if slot then
  return {1, fence, slot}
end
return {1, fence}
