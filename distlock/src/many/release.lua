-- Give back every name of a set that still holds this acquisition's token, and wake a waiter
-- of each name that may be listened for (see setnx/release.lua, whose rule this applies to
-- each name).
-- KEYS: the n names' lock keys in the set's order (each string is also the name's wake-up
-- channel), then their n waited-for marks. ARGV as for setnx/release.lua: [1] owner token,
-- [2] nonce (unused), [3] this release's wake-up id, [4] 's' to publish with SPUBLISH, [5] '1'
-- to publish even without a mark; trailing empty ones left off.
-- Returns 1 when every name was ours (all released now), 0 when any was not (expired, maybe
-- taken by another owner, whose hold is left alone; those that were ours are released all
-- the same). A retried release finds none and answers 0, changing nothing.
local n = #KEYS / 2
local all = 1
for i = 1, n do
  if redis.pcall('get', KEYS[i]) == ARGV[1] then
    if redis.call('del', KEYS[i], KEYS[n + i]) > 1 or ARGV[5] == '1' then
      redis.pcall(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[i], ARGV[3] or '')
    end
  else
    all = 0
  end
end
return all
