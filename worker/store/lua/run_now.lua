#!lua
--[[ Run one delayed job now: move its member from delayed onto the jobs stream, atomically.

KEYS[1]  delayed   sorted set; member = the job's fields as JSON
KEYS[2]  jobs      stream
ARGV[1]  member    the job's member in delayed, byte for byte

Returns: the new entry id on jobs, or false when the member is no longer in
delayed (a worker promoted it since, or someone else ran or cancelled it).
Effects: XADD jobs with the job's fields as they are (attempts unchanged) and
ZREM the member, in one script, so a promoting worker and this call never
both add the job. A member that is not a JSON object of strings goes as the
single field `malformed_delayed`, as promote sends it, for the worker to
dead-letter.
]]
--- @include "delayed_entry"
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return false
end
local new_id = redis.call('XADD', KEYS[2], '*', unpack(delayed_entry(ARGV[1])))
redis.call('ZREM', KEYS[1], ARGV[1])
return new_id
