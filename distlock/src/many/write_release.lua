-- Give back every name of a write set that still holds this acquisition, or, for a waiting
-- set that gives up, withdraw its intent on each name (`write.lua`'s `write_give`, applied to
-- each name in turn): each name's waiters are woken as by a write release. `fence.lua`,
-- `rwlock/prelude.lua`, `rwlock/write.lua` and `write_head.lua` come first.
-- KEYS: see `write_head.lua` (each lock hash's string is also the name's wake-up channel).
-- ARGV as for rwlock/write_release.lua: [1] owner, [2] the acquisition's nonce, [3] unused,
-- [4] 's' to publish with SPUBLISH; trailing empty ones left off.
-- Returns 1 when every name was held (all released now), 0 when any was not (expired: its
-- successor's hold is left alone; those that were held are released all the same). A
-- retried release finds none and answers 0, changing nothing.
local owner, nonce = ARGV[1], ARGV[2]
local now = server_ms()
local all = 1
for i = 1, SET_SIZE do
  point(i)
  local s = load(now, owner)
  if not s or write_give(s, owner, nonce, now, ARGV[4]) ~= 1 then
    all = 0
  end
end
return all
