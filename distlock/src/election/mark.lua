-- An observer's read of an election (`election/observe.rs`), put in front of
-- `inspect/inspect.lua`, which reads the lock's holder and fencing counter in the same step.
-- It marks the lock as waited for (the setnx waiters' mark, see `setnx/acquire.lua`), so that
-- the holder's release publishes and the observer hears it: set in the same step as the read,
-- no release falls between the two unheard. The mark lives ARGV[1] ms, the election's ttl;
-- the observer reads (and marks) again by then. A free lock is marked too: the next holder's
-- release then publishes, which observers want to hear.
-- KEYS[7] the lock's waited-for mark (its slot; KEYS[1] to KEYS[6] are the inspection's),
-- ARGV[1] the mark's lifetime in milliseconds.
redis.call('set', KEYS[7], '1', 'PX', ARGV[1])
