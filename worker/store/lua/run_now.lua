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
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return false
end
local ok, fields = pcall(cjson.decode, ARGV[1])
local args = {}
if ok and type(fields) == 'table' then
  for k, v in pairs(fields) do
    args[#args + 1] = tostring(k)
    args[#args + 1] = tostring(v)
  end
end
if #args == 0 then
  args = {'malformed_delayed', ARGV[1]}
end
local new_id = redis.call('XADD', KEYS[2], '*', unpack(args))
redis.call('ZREM', KEYS[1], ARGV[1])
return new_id
