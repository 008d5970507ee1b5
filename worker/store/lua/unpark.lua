#!lua
--[[ Release the parked jobs of a resumed kind onto the jobs stream, oldest first, atomically.

KEYS[1]  parked    sorted set of parked jobs (see park.lua)
KEYS[2]  jobs      stream
ARGV[1]  kind      the resumed kind
ARGV[2]  batch     how many to move in this call

Returns: the number moved (0..batch). The caller repeats while it equals
batch. Each job is XADDed with its fields as they were (attempts unchanged)
and its member removed in the same script, in the members' order (the order
the jobs had on `jobs`), so no job is lost, doubled or reordered.
]]
local low = '[' .. ARGV[1] .. '\0'
local high = '(' .. ARGV[1] .. '\1'
local members = redis.call('ZRANGE', KEYS[1], low, high, 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(members) do
  local first = string.find(member, '\0', 1, true)
  local second = string.find(member, '\0', first + 1, true)
  local fields = cjson.decode(string.sub(member, second + 1))
  redis.call('XADD', KEYS[2], '*', unpack(fields))
  redis.call('ZREM', KEYS[1], member)
end
return #members
