#!lua
--[[ Promote due delayed jobs onto the jobs stream, atomically; park those of a paused kind.

KEYS[1]  delayed   sorted set; score = run time (epoch s), member = job fields as JSON
                   (or `throttled`, the jobs a throttle deferred: same members, same move)
KEYS[2]  jobs      stream
KEYS[3]  paused    hash kind -> JSON: the kinds paused now (the partition's copy)
KEYS[4]  parked    sorted set of parked jobs (see park.lua)
ARGV[1]  now       epoch seconds (float); members with score <= now are due; `time`: Redis's own
                   clock (TIME), as the worker asks, so that no machine's clock runs a job early
ARGV[2]  batch     how many members to move in this call

Returns: the number of members moved (0..batch). The caller repeats while the
return equals batch. Each member is XADDed (or, for a paused kind, added to
`parked` after the kind's parked jobs) and ZREMed in the same script, so a
crash or a second promoter never adds a job twice nor loses one, and a
paused kind's retries and delayed jobs wait for resume like the rest of it.
A member that is not a JSON object of strings (numbers pass, as their text) is
moved with the single field `malformed_delayed` holding it, so the consumer's
edge dead-letters it: among them a member whose kind is not a string (a
number, a list, an object, null), which would otherwise reach the stream as
Lua's text for it ("table: 0x...").
]]
--- @include "delayed_entry"
--- @include "parked_member"
local clock = redis.call('TIME')
local upto = ARGV[1]
if upto == 'time' then upto = clock[1] .. '.' .. string.format('%06d', tonumber(clock[2])) end
local due = redis.call('ZRANGE', KEYS[1], '-inf', upto, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for i, member in ipairs(due) do
  local args = delayed_entry(member)
  local kind = nil
  for j = 1, #args, 2 do
    if args[j] == 'kind' then kind = args[j + 1] end
  end
  if kind and redis.call('HEXISTS', KEYS[3], kind) == 1 then
    redis.call('ZADD', KEYS[4], 0, parked_member(kind, now_ms, i, args))
  else
    redis.call('XADD', KEYS[2], '*', unpack(args))
  end
  redis.call('ZREM', KEYS[1], member)
end
return #due
