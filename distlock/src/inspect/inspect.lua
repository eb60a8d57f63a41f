-- Read a lock's whole state in one step, for `Client::inspect`. Writes nothing.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] last forced unlock, KEYS[4] and KEYS[5]
-- a read/write lock's readers and intents, KEYS[6] a semaphore's permit slots (all one slot)
-- Returns {type, pttl, payload, counter, forced, server ms, readers, intents, slots}: payload is the
-- value of a string lock (its owner token and who took it), the flat field list of a hash
-- lock, the flat member and score list of a semaphore's sorted set (lowest score first), or nil;
-- counter is the fencing counter's value or nil; forced is the flat field list of the last
-- forced unlock, or empty. Server time lets the client turn read/write leases (server ms)
-- into remaining durations. Readers and intents: the flat member and score lists of a
-- read/write lock's sorted sets (empty for the other modes). Slots: the flat field and value
-- list of a semaphore's permit slots (each fenced permit's owner and slot; empty otherwise).
local kind = redis.call('type', KEYS[1]).ok
local payload = false
local readers, intents, slots = {}, {}, {}
if kind == 'string' then
  payload = redis.call('get', KEYS[1])
elseif kind == 'hash' then
  payload = redis.call('hgetall', KEYS[1])
  if redis.call('hexists', KEYS[1], 'rwlock-layout') == 1 then
    readers = redis.pcall('zrange', KEYS[4], '0', '-1', 'withscores')
    intents = redis.pcall('zrange', KEYS[5], '0', '-1', 'withscores')
    if readers.err then
      readers = {}
    end
    if intents.err then
      intents = {}
    end
  end
elseif kind == 'zset' then
  payload = redis.call('zrange', KEYS[1], '0', '-1', 'withscores')
  slots = redis.pcall('hgetall', KEYS[6])
  if slots.err then
    slots = {}
  end
end
local counter = redis.pcall('get', KEYS[2])
if type(counter) ~= 'string' then
  counter = false
end
local forced = redis.pcall('hgetall', KEYS[3])
if forced.err then
  forced = {}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {kind, redis.call('pttl', KEYS[1]), payload, counter, forced, now, readers, intents,
  slots}
