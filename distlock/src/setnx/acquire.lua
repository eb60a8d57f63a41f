-- Take the lock: SET NX PX with the owner's token, and issue the next fencing token if asked.
-- Without fencing the client sends the plain `SET key token NX PX ttl GET` instead and runs
-- this script only for the rare replies that need it (its own token: a lost reply; WRONGTYPE:
-- another mode's lock or the application's data). `fence.lua` and `held_as.lua` come first.
-- KEYS[1] lock key, then (same slot, declared only when used) the fencing counter when ARGV[7]
-- is '1', then the lock's waited-for mark when ARGV[8] is '1'
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds, ARGV[3] '1' when an earlier attempt of
-- this acquisition may have succeeded without its reply reaching us, ARGV[4] '1' when the
-- caller wants the holder's remaining ttl (a waiter that knows a recent one does not),
-- ARGV[5] the acquisition's nonce (unused: the token is already unique per acquisition),
-- ARGV[6] who takes it (unused: the token carries it), ARGV[7] '1' to mint a fencing token,
-- ARGV[8] '1' when the caller waits if the lock is busy: it is then marked as waited for
-- (for as long as the holder's lease has left), so that its release publishes. Sent only
-- when set: a missing ARGV[8] reads as nil, so a caller that does not wait sends 7 arguments.
-- A waiter sleeps at most that long before it tries (and marks) again, and the mark is set
-- in the same step that found the lock busy: no release can fall between the two unheard.
-- Returns {1, fencing token or -1 if not asked} when held, {0, holder's remaining ms or -1 if
-- not asked} when busy, {-1, type} when a key holds something that is not one of our locks,
-- {-3, mode} when the name is held as a lock of another mode.
-- Two calls on the common paths (taken; busy and not asked): waiters retry this script, so
-- its cost is what a contended lock costs the server.
local fencing = ARGV[7] == '1'
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if not fencing then
    return {1, -1}
  end
  local fence, bad = mint(KEYS[2])
  if not fence then
    -- The counter key holds the application's data: undo our write, leave theirs alone.
    redis.call('del', KEYS[1])
    return {-1, bad}
  end
  return {1, fence}
end
local waits = ARGV[8] == '1'
if ARGV[3] ~= '1' and ARGV[4] ~= '1' and not waits then
  return {0, -1}
end
local held = redis.pcall('get', KEYS[1])
if type(held) == 'table' then
  -- Not a string: the reentrant or read/write lock or the semaphore of the same name, or the
  -- application's.
  return held_as(KEYS[1])
end
local ttl = redis.call('pttl', KEYS[1])
if ttl >= 0 then
  if ARGV[3] == '1' and held == ARGV[1] then
    -- Our own token: the earlier attempt took the lock but its reply was lost. The lease is
    -- made at least the ttl asked for, never shortened.
    if ttl < tonumber(ARGV[2]) then
      redis.call('pexpire', KEYS[1], ARGV[2])
    end
    if not fencing then
      return {1, -1}
    end
    -- A token of its own, minted as every other: the one the lost reply carried never
    -- reached the caller, and the counter may have gone back since (deleted, expired, a
    -- restart), so reading it could hand out 0 or a token below an earlier one.
    local fence, bad = mint(KEYS[2])
    if not fence then
      give_back(KEYS[1], KEYS[3])
      return {-1, bad}
    end
    return {1, fence}
  end
  if waits then
    redis.call('set', KEYS[fencing and 3 or 2], '1', 'PX', int(math.max(ttl, 1)))
  end
  return {0, ttl}
end
-- Our locks always expire: a key without expiry is the application's own value.
return {-1, 'string without expiry'}
