-- A write to a resource fenced by tokens: refused when the token is below the highest the
-- resource has seen (its holder's lease ended and a newer holder wrote), else the mark is
-- raised to it and the write made, in one step.
-- KEYS[1] the resource (the application's key), KEYS[2] its mark (same Cluster slot; see
-- fenced/mod.rs `mark_key`)
-- ARGV[1] the token (decimal), ARGV[2] how long the mark is kept at least, in ms, ARGV[3] the
-- write: 'set' value | 'set_px' value ms | 'del' | 'incr_by' n | 'hset' field value |
-- 'hdel' field | 'hincr_by' field n, its arguments from ARGV[4]
-- Returns {1, what the write returned} when written, {0, the highest token seen} when
-- refused. An equal token is the same holder writing again: accepted.
-- The tokens are compared as numbers: they are below 2^53 (a microsecond clock reading), which
-- a Lua number holds exactly.
local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('get', KEYS[2]) or '0')
if token < highest then
  return {0, string.format('%.0f', highest)}
end
local op = ARGV[3]
local result
if op == 'set' then
  redis.call('set', KEYS[1], ARGV[4])
  result = 1
elseif op == 'set_px' then
  redis.call('set', KEYS[1], ARGV[4], 'PX', ARGV[5])
  result = 1
elseif op == 'del' then
  result = redis.call('del', KEYS[1])
elseif op == 'incr_by' then
  result = redis.call('incrby', KEYS[1], ARGV[4])
elseif op == 'hset' then
  result = redis.call('hset', KEYS[1], ARGV[4], ARGV[5])
elseif op == 'hdel' then
  result = redis.call('hdel', KEYS[1], ARGV[4])
elseif op == 'hincr_by' then
  result = redis.call('hincrby', KEYS[1], ARGV[4], ARGV[5])
else
  return redis.error_reply('distlock fenced write: unknown operation ' .. tostring(op))
end
-- The mark outlives the resource's own expiry, and is kept at least ARGV[2] after its last
-- write: a holder stalled longer than that could write once more.
local keep = tonumber(ARGV[2])
local left = redis.call('pttl', KEYS[1])
if left > keep then
  keep = left
end
redis.call('set', KEYS[2], ARGV[1], 'PX', string.format('%.0f', keep))
return {1, result}
