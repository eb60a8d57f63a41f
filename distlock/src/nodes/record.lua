-- Write a process's record (see records.rs) and its expiry in one step: a process that died
-- between a plain HSET and its PEXPIRE left a key that never expired.
-- KEYS[1] the record; ARGV[1] how long it is kept, in ms; ARGV[2..] field, value, ...
redis.call('hset', KEYS[1], unpack(ARGV, 2))
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
