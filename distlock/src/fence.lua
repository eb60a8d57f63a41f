-- Fencing counters: put in front of every script that mints a fencing token or raises a
-- counter (setnx and reentrant acquire, every read/write script, the quorum's raise), so the
-- rule below has one home.
--
-- A counter lives FENCE_KEPT_MS after its last use (as lib.rs and the README say; key.rs checks):
-- a service that locks `order:<id>` with fencing must not keep one key per order for ever.
-- Its expiry is safe because of the fence floor: a token is never below the server clock's
-- current millisecond, in microseconds, and every token stays at or below the clock of its
-- time (each acquisition takes the server more than 1 us). So a counter that went back (it
-- expired, was never there, was lost in a restart without persistence, or a promoted replica
-- had not received the latest increments) still issues a token above every earlier one, as
-- long as this server's clock is not behind the clock of the earlier tokens by more than the
-- time that passed since (at least the retention, for an expired counter). Written back at
-- most once a millisecond per lock.
--
-- Every number handed to redis.call goes as a string: Redis 7.2.0 to 7.2.4 turn a Lua number
-- into text as `1.8e+15`, after which the counter is no integer and INCR fails for ever.
local FENCE_KEPT_MS = '86400000'

-- Integral numbers as Redis expects them (Lua would print large ones as 1.7e+12).
local function int(n)
  return string.format('%.0f', n)
end

-- The next fencing token from the counter `key`, or nil and a description when the key holds
-- the application's data. `now_us`: the server's time in microseconds, if already read.
local function mint(key, now_us)
  local fence = redis.pcall('incr', key)
  if type(fence) == 'table' then
    return nil, redis.call('type', key).ok .. ' at its fencing counter'
  end
  if not now_us then
    local t = redis.call('time')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local floor = now_us - now_us % 1000
  if fence < floor then
    fence = floor
    redis.call('set', key, int(fence), 'PX', FENCE_KEPT_MS)
  else
    redis.call('pexpire', key, FENCE_KEPT_MS)
  end
  return fence
end

-- One token for a set of names (`Client::lock_many`, `Client::write_many`), minted from
-- each name's counter in `counters`: the largest of their next tokens, so above every
-- earlier token of each name, and every counter raised to it, so that each name's next
-- token is above it too. Returns the token, or nil, a description and the place of the
-- counter that holds the application's data (counters before it were counted up: a counter
-- only ever goes up, so that costs nothing). `now_us`: as for `mint`.
local function mint_set(counters, now_us)
  if not now_us then
    local t = redis.call('time')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local tokens, top = {}, 0
  for i = 1, #counters do
    local fence, bad = mint(counters[i], now_us)
    if not fence then
      return nil, bad, i
    end
    tokens[i] = fence
    top = math.max(top, fence)
  end
  for i = 1, #counters do
    if tokens[i] < top then
      redis.call('set', counters[i], int(top), 'PX', FENCE_KEPT_MS)
    end
  end
  return top
end
