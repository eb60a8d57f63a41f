-- Take one permit of the semaphore, or answer busy while every permit is held.
-- KEYS[1] the semaphore's sorted set, KEYS[2] its fencing counter (same slot; declared only
-- when ARGV[7] is '1')
-- ARGV[1] owner token (one per acquisition), ARGV[2] ttl in ms, ARGV[7] '1' to mint a
-- fencing token, ARGV[8] the setnx lock's waits flag (unused: every release publishes; sent
-- here only so that ARGV[9] has its place), ARGV[9] the number of permits the caller asks
-- the semaphore to have;
-- ARGV[3] (retry), ARGV[4] (want the holder's ttl), ARGV[5] (nonce) and ARGV[6] (holder)
-- are unused: the token is unique per acquisition and carries who took it, so a retry
-- finds its own permit, and the busy answer costs nothing extra
-- Returns {1, fencing token or -1 if not asked} when held, {0, ms until the first permit's
-- lease ends} when busy, {-1, type} when a key holds something that is not one of our locks,
-- {-3, mode} when the name is held as a lock of another mode, {-4, recorded, asked} when the
-- holders recorded another number of permits (refused: the limit is never changed while a
-- permit is held).
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
local fence = -1
if ARGV[7] == '1' then
  local bad
  fence, bad = mint(KEYS[2], now_us)
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
settle(now)
return {1, fence}
