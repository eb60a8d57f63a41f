-- Head of a write set's scripts (`Client::write_many`), after `fence.lua`,
-- `rwlock/prelude.lua` and `rwlock/write.lua`: every name of the set is a read/write lock
-- taken on its write side, and the scripts apply the write side's one rule (`write.lua`) to
-- each name in turn.
-- KEYS, as the calling convention lays out a set: the n names' lock hashes in the set's fixed
-- order (see `key/set.rs`), then their n readers, then their n intents, then (acquire, only
-- when ARGV[7] is '1') their n fencing counters; every key of one name in its Cluster slot.
--
-- The prelude reads one lock's keys from the chunk's locals LOCK, READERS, INTENTS and FENCE
-- (upvalues of its functions and of `write.lua`'s), so pointing them at a name's keys points
-- every function at that name: `point(i)` before each name's turn.
local SET_SIZE = #KEYS / (FENCING and 4 or 3)

local function point(i)
  LOCK, READERS, INTENTS = KEYS[i], KEYS[SET_SIZE + i], KEYS[2 * SET_SIZE + i]
  FENCE = KEYS[3 * SET_SIZE + i]
end
