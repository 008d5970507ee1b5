#!lua
--[[ Hand an entry this worker cannot run back to the queue, for a worker that can: one move.

KEYS[1]  jobs      stream
KEYS[2]  delayed   sorted set
ARGV[1]  group     consumer group name
ARGV[2]  entry_id  the delivered entry (a payload version above the worker's, or a kind it lacks)
ARGV[3]  consumer  the worker handing it back (it must still own the entry: includes/owned.lua)
ARGV[4]  run_at    "0": back on `jobs` now (a live worker can run it); else the `delayed`
                   score, epoch seconds, when it is looked at again (no live worker can yet)
ARGV[5..] the job's fields with `handed_back` + 1: name, value pairs for `jobs`; for `delayed`,
          ARGV[5] alone, the member (compact JSON, sorted keys)

Returns: the new entry's id (on `jobs`) or 1 (in `delayed`) when handed back; 0 when the
entry was no longer this consumer's (reclaimed by another worker, or acknowledged), in which
case nothing changed.
Effects: XACK and XDEL the delivered entry, and XADD its copy to `jobs` or ZADD it to
`delayed`, in one script: the job is never both handed back and run, and its copy is a
fresh entry, delivered 0 times, so a hand-back never counts toward MAX_DELIVERIES (the
poison limit) and never writes a dead letter.
]]
--- @include "owned"
if not owned(KEYS[1], ARGV[1], ARGV[3], ARGV[2]) then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if ARGV[4] ~= '0' then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
  return 1
end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV, 5))
