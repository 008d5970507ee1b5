#!lua
--[[ Put a dead entry back on the jobs stream, atomically, and record the move.

KEYS[1]  dead      dead-letter stream
KEYS[2]  jobs      stream
KEYS[3]  outcomes  hash replay:<batch> (dead id -> JSON outcome)
KEYS[4]  log       stream jobs:dead:log (the archive's record of moves out of jobs:dead)
ARGV[1]  dead_id   the dead entry to replay
ARGV[2]  batch     replay batch id, stored as `replay_batch`
ARGV[3]  ttl_s     expiry of the outcomes hash, seconds
ARGV[4]  queued    the status recorded until the worker runs the job
                   (worker.vocabulary.RECORDED_QUEUED)
ARGV[5]  at        when, ISO-8601 UTC (for the archive's replayed_at)
ARGV[6]  record    '1': add a `replayed` record to the log (the archive is on); '0': do not
ARGV[7]  by        who replays (for the archive's replayed_by; '' when not said)
ARGV[8..] names of fields to drop (error, traceback, reason, ...), then
          optionally '=' followed by field, value pairs to set (the replay's
          trace context: traceparent, tracestate), each replacing the entry's own

Returns: the new entry id on `jobs`, or false when the dead entry is no longer
there (already replayed or discarded by someone else, trimmed, or evicted).
Because the read, XADD, XDEL and the log record are one script, two people
replaying (or one replaying, one discarding) the same ids move each once.
The job goes back with attempts 0, `replay_of` = dead_id, `replay_batch`, and
`replays` = the entry's own `replays` + 1 (how many times this job was
replayed: a dead letter that failed again after a replay carries them).
The outcomes hash gets dead_id -> {"status": ARGV[4], "new_id": ...}, which
the worker overwrites with the job's outcome, so replay_status knows every
job of the batch, run or not. The log record carries the entry's own fields
(as `f.<name>`), so the archive gets the row even if it never saw the entry.
]]
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return false
end
local drop = {attempts = true, replay_of = true, replay_batch = true, replays = true}
local set = {}
local i = 8
while i <= #ARGV and ARGV[i] ~= '=' do
  drop[ARGV[i]] = true
  i = i + 1
end
for j = i + 1, #ARGV - 1, 2 do
  drop[ARGV[j]] = true
  set[#set + 1] = ARGV[j]
  set[#set + 1] = ARGV[j + 1]
end
local fields = found[1][2]
local replays = 0
for i = 1, #fields, 2 do
  if fields[i] == 'replays' then replays = tonumber(fields[i + 1]) or 0 end
end
local args = {}
for i = 1, #fields, 2 do
  if not drop[fields[i]] then
    args[#args + 1] = fields[i]
    args[#args + 1] = fields[i + 1]
  end
end
for j = 1, #set do
  args[#args + 1] = set[j]
end
args[#args + 1] = 'attempts'
args[#args + 1] = '0'
args[#args + 1] = 'replay_of'
args[#args + 1] = ARGV[1]
args[#args + 1] = 'replay_batch'
args[#args + 1] = ARGV[2]
args[#args + 1] = 'replays'
args[#args + 1] = tostring(replays + 1)
local new_id = redis.call('XADD', KEYS[2], '*', unpack(args))
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode({status = ARGV[4], new_id = new_id}))
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[6] == '1' then
  local record = {'event', 'replayed', 'dead_id', ARGV[1], 'batch', ARGV[2], 'new_id', new_id, 'at', ARGV[5],
                  'by', ARGV[7]}
  for i = 1, #fields, 2 do
    record[#record + 1] = 'f.' .. fields[i]
    record[#record + 1] = fields[i + 1]
  end
  redis.call('XADD', KEYS[4], '*', unpack(record))
end
return new_id
