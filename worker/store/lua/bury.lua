#!lua
--[[ Move a job to the dead-letter stream and acknowledge it, atomically.

KEYS[1]  jobs        stream
KEYS[2]  dead        dead-letter stream (capped, MAXLEN ~)
KEYS[3]  evicted     counter of dead entries evicted by the cap
KEYS[4]  lock        optional: the job's unique lock (`unique:<kind>:<unique_key>`), released
                     when the dead entry's job id holds it (includes/release_unique.lua)
ARGV[1]  group       consumer group name
ARGV[2]  entry_id    the entry to bury
ARGV[3]  maxlen      approximate cap of the dead stream
ARGV[4]  min_idle_ms when > 0, bury only if the entry is pending and idle at
                     least this long (the reclaim loop's poison check); 0 = always
ARGV[5]  keep        1: the dead entry starts from the entry's own fields; 0: only
                     from ARGV[6..] (an oversized entry, whose fields the caller cut down)
ARGV[6]  consumer    the settling consumer: bury only while the entry is still its
                     own (includes/owned.lua); '' = any owner (the poison check)
ARGV[7..] field, value pairs that override or extend the entry's own fields
          (attempts, error, traceback, reason, failed_at, worker, ...)

Returns: the dead entry's id, or false when nothing was done (the entry is no
longer pending, or was claimed since the caller looked, or is another
consumer's since a reclaim took it over).
With keep = 1 the original fields are read here from the stream, byte for
byte, so a malformed entry is preserved exactly as it arrived.
]]
--- @include "owned"
--- @include "release_unique"
local min_idle = tonumber(ARGV[4])
if min_idle > 0 then
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', min_idle, ARGV[2], ARGV[2], 1)
  if #p == 0 then
    return false
  end
end
if not owned(KEYS[1], ARGV[1], ARGV[6], ARGV[2]) then
  return false
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
local overrides = {}
for i = 7, #ARGV, 2 do
  overrides[ARGV[i]] = ARGV[i + 1]
end
local args = {}
local found = {}
if ARGV[5] == '1' then
  found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
end
if #found == 1 then
  local fields = found[1][2]
  for i = 1, #fields, 2 do
    if overrides[fields[i]] == nil then
      args[#args + 1] = fields[i]
      args[#args + 1] = fields[i + 1]
    end
  end
end
for i = 7, #ARGV, 2 do
  args[#args + 1] = ARGV[i]
  args[#args + 1] = ARGV[i + 1]
end
local before = redis.call('XLEN', KEYS[2])
local dead_id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(args))
local evicted = before + 1 - redis.call('XLEN', KEYS[2])
if evicted > 0 then
  redis.call('INCRBY', KEYS[3], evicted)
end
redis.call('XDEL', KEYS[1], ARGV[2])
if KEYS[4] then
  local job_id, outbox_id = '', ''
  for i = 1, #args, 2 do
    if args[i] == 'job_id' then job_id = args[i + 1] end
    if args[i] == 'outbox_id' then outbox_id = args[i + 1] end
  end
  release_unique(KEYS[4], job_id ~= '' and job_id or outbox_id)
end
return dead_id
