#!lua
--[[ Cancel one delayed job: take its member out of delayed before a worker promotes it, and record it.

KEYS[1]  delayed   sorted set; member = the job's fields as JSON (or `throttled` or `fair:queue`, same members; or
                   `parked`, members kind NUL order NUL fields as a JSON array: includes/parked_member.lua)
KEYS[2]  log       stream jobs:dead:log (the archive's record of dead entries' moves)
ARGV[1]  member    the job's member in delayed, byte for byte
ARGV[2]  batch     the cancel call's batch id
ARGV[3]  by        who cancels it
ARGV[4]  reason    why (required by opslib)
ARGV[5]  at        when, ISO-8601 UTC
ARGV[6]  record    '1': add a `discarded` record to the log (the archive is on); '0': do not
KEYS[3]  lock      optional: the job's unique lock, released with the cancel (includes/release_unique.lua)
ARGV[7]  job_id    with KEYS[3]: the job's id (the lock is released only while this job holds it)

Returns: the member's run time (its score, as a string) when it was removed,
or false when it is no longer there (a worker promoted it since, so the job
runs; or someone else ran or cancelled it). Promotion (and unpark, for
`parked`) takes a member out in its own script, so a job is either cancelled
here or promoted, never both.

The record (with ARGV[6] = '1') is a `discarded` record as discard.lua
writes, carrying the job's fields as `f.<name>` plus `f.reason` =
`cancelled`, so the archive gets a row with status discarded for a job that
never ran. Its dead_id is `<ms>-<seq>-cancelled`, where `<ms>-<seq>` is the
id this same XADD gives the record in the log: unique (a stream's ids only
grow, even after trims), and never the id of a jobs:dead entry, whose ids are
digits only. The id is computed before the XADD (the stream's
last-generated-id and the server's clock) and given to it explicitly.
]]
--- @include "release_unique"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return false
end
redis.call('ZREM', KEYS[1], ARGV[1])
if KEYS[3] then
  release_unique(KEYS[3], ARGV[7])
end
if ARGV[6] ~= '1' then
  return score
end

-- The id XADD '*' would give: the clock's milliseconds, or the last id's plus one sequence.
local clock = redis.call('TIME')
local ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local seq = 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local last_ms, last_seq = string.match(info[i + 1], '^(%d+)-(%d+)$')
      if tonumber(last_ms) >= ms then
        ms, seq = tonumber(last_ms), tonumber(last_seq) + 1
      end
    end
  end
end
local id = string.format('%d-%d', ms, seq)

local record = {'event', 'discarded', 'dead_id', id .. '-cancelled', 'batch', ARGV[2], 'by', ARGV[3],
                'reason', ARGV[4], 'at', ARGV[5]}
local ok, job = pcall(cjson.decode, ARGV[1])
local first = string.find(ARGV[1], '\0', 1, true)
local second = first and string.find(ARGV[1], '\0', first + 1, true)
if second then  -- a parked member: its fields are name, value, ... after the second NUL
  local read, fields = pcall(cjson.decode, string.sub(ARGV[1], second + 1))
  ok, job = read and type(fields) == 'table', {}
  if ok then
    for i = 1, #fields - 1, 2 do job[fields[i]] = fields[i + 1] end
  end
end
if ok and type(job) == 'table' then
  local names = {}
  for name in pairs(job) do
    if name ~= 'reason' then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local value = job[name]
    record[#record + 1] = 'f.' .. name
    record[#record + 1] = type(value) == 'string' and value or cjson.encode(value)
  end
else
  record[#record + 1] = 'f.member'
  record[#record + 1] = ARGV[1]
end
record[#record + 1] = 'f.reason'
record[#record + 1] = 'cancelled'
redis.call('XADD', KEYS[2], id, unpack(record))
return score
