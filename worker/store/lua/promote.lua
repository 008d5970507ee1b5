#!lua
--[[ Promote due delayed jobs onto the jobs stream, atomically.

KEYS[1]  delayed   sorted set; score = run time (epoch s), member = job fields as JSON
KEYS[2]  jobs      stream
ARGV[1]  now       epoch seconds (float); members with score <= now are due
ARGV[2]  batch     how many members to move in this call

Returns: the number of members moved (0..batch). The caller repeats while the
return equals batch. Each member is XADDed and ZREMed in the same script, so a
crash or a second promoter never adds a job twice nor loses one.
A member that is not a JSON object of strings (numbers pass, as their text) is
moved with the single field `malformed_delayed` holding it, so the consumer's
edge dead-letters it: among them a member whose kind is not a string (a
number, a list, an object, null), which would otherwise reach the stream as
Lua's text for it ("table: 0x...").
]]
--- @include "delayed_entry"
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', unpack(delayed_entry(member)))
  redis.call('ZREM', KEYS[1], member)
end
return #due
