-- The write side's rule: what a write acquisition finds, how it takes, re-enters or waits
-- for the lock, and how a write acquisition is given back. Put after `prelude.lua` in front
-- of the scripts that take or give back the write side: `write_acquire.lua` and
-- `write_release.lua` (one name), and a write set's scripts (`many/write_*.lua`, every name
-- of the set in turn, the prelude's LOCK, READERS, INTENTS and FENCE pointed at its keys),
-- so that a set of names taken in write mode excludes each name's readers and writers by
-- the very rule a single writer follows: one home for the rule.

-- What the write acquisition of `owner` finds in the lock `s` (loaded for it): 'ours' when
-- the owner holds the write lock (re-entry, or this acquisition retried after a lost reply),
-- 'upgrade' when it holds only the read lock (refused for good: two readers upgrading would
-- each wait for the other to leave, forever; Redisson's read lock deadlocks here), 'free'
-- when it may take it now, else 'busy' and when the lock frees at the latest (server ms).
local function write_finds(s, owner, now)
  if s.writer == owner then
    return 'ours'
  end
  if s.own then
    return 'upgrade'
  end
  local readers_until = (s.writer or s.fresh) and 0 or latest(READERS)
  if not s.writer and readers_until <= now then
    return 'free'
  end
  return 'busy', s.writer and s.wuntil or readers_until
end

-- Re-enters `owner`'s write tenure with the acquisition `nonce` (or finds it again after a
-- lost reply): the tenure keeps its token, and a tenure taken without one gets `fence` (a
-- token minted for this acquisition, or nil); the lease lasts at least `ttl` ms from `now`,
-- never shortened. Returns the tenure's token (-1: none).
local function write_reenter(s, nonce, now, ttl, fence)
  local fields = {}
  if fence and s.wfence < 0 then
    s.wfence = fence
    fields = {'writer-fence', int(fence)}
  end
  if not has(s.wholds, nonce) then
    s.wholds = s.wholds .. ' ' .. nonce
    fields[#fields + 1] = 'writer-holds'
    fields[#fields + 1] = s.wholds
  end
  renew_write(s, now, ttl, fields)
  return s.wfence
end

-- Takes the free lock (`write_finds` said so) for `owner`'s acquisition `nonce`, taken by
-- `holder` (kept for inspection), with the tenure's token `fence` (-1: none) and a lease of
-- `ttl` ms from `now`. The owner's intent, if it registered one, has had its turn.
local function write_take(s, owner, nonce, holder, now, ttl, fence)
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
      redis.call('zrem', INTENTS, owner)
    end
  end
  write(s, now, fields, s.wuntil)
  s.fresh = nil
end

-- A writer that did not get the lock: when it `waits`, it (re)registers its intent, which
-- keeps new readers out until it had its turn and must outlive the gap until its next
-- attempt. A single try registers none: it does not come back, and its intent would only
-- keep new readers out. (A waiter that gives up withdraws its intent with its release call:
-- `write_give`.) The summary `intents-until` is set past the intent by as much again, so a
-- writer's attempts rewrite it once per intent length, not each time; readers that find no
-- live intent behind it bring it down. An intent alone keeps the name a read/write lock
-- (a set's intent may be the first thing on a free name). Returns within how many ms the
-- writer must come back at the latest: a third of the intent's life.
local function write_intent(s, owner, now, ttl, waits)
  local intent_ms = math.min(ttl, INTENT_MAX_MS)
  if waits then
    local ends = now + intent_ms
    local fields = {}
    if s.fresh then
      fields = {'rwlock-layout', '3'}
    end
    local created = redis.call('zadd', INTENTS, int(ends), owner, '0', KEEP) == 2
    if ends > s.intents_until then
      s.intents_until, s.intents_changed = ends + intent_ms, true
    end
    write(s, now, fields, ends, created and INTENTS)
    s.fresh = nil
  end
  if s.dirty then
    settle(s, now)
  end
  return math.floor(intent_ms / 3)
end

-- Publishes `payload` on the lock's channel: `how` is 's' for SPUBLISH (Redis Cluster),
-- 'both' where the script is not told (an acquire script giving back what an earlier attempt
-- took: a rare path, and a server without SPUBLISH refuses it harmlessly), else PUBLISH.
local function wake(how, payload)
  if how ~= 's' then
    redis.pcall('publish', LOCK, payload)
  end
  if how == 's' or how == 'both' then
    redis.pcall('spublish', LOCK, payload)
  end
end

-- Gives back `owner`'s write acquisition `nonce`. The last one wakes every waiter: any number
-- of readers may come in now. If the owner also holds the read lock (a downgrade), the lock
-- stays read-held by it. Returns 1 when the acquisition was given back, 0 when it is not
-- held here (expired, or already given back by an earlier try of this release).
--
-- The same call is what a waiting writer that gives up (its wait ran out, or its future was
-- dropped) sends for the acquisition it never got: finding no hold, it withdraws the owner's
-- intent and wakes the waiters, so the readers the intent kept out come in at once instead
-- of sleeping until it lapses (nothing else announces that). An owner has one intent,
-- whichever of its acquisitions registered it; a release of an earlier tenure that comes
-- late may withdraw it too, and the waiting acquisition registers it again at its next
-- attempt. `how`: see `wake`.
local function write_give(s, owner, nonce, now, how)
  if s.writer ~= owner or not has(s.wholds, nonce) then
    if s.writer ~= owner and redis.call('zrem', INTENTS, owner) == 1 then
      settle(s, now)
      if not s.writer then
        wake(how, 'all')
      end
    elseif s.dirty then
      settle(s, now)
    end
    return 0
  end
  local rest = without(s.wholds, nonce)
  if rest ~= '' then
    s.wholds = rest
    redis.call('hset', LOCK, 'writer-holds', rest)
    return 1
  end
  s.writer = nil
  if latest(READERS) <= now and (s.intents_until <= now or latest(INTENTS) <= now) then
    -- The last hold of all: nothing is left to keep.
    redis.call('del', LOCK, READERS, INTENTS)
  else
    redis.call('hdel', LOCK, 'writer', 'writer-until', 'writer-fence', 'writer-holds',
      'writer-holder')
    prune(s, now)
    settle(s, now)
  end
  wake(how, 'all')
  return 1
end
