#!lua
--[[ Schedule a failed job's next attempt and acknowledge the failed entry.

KEYS[1]  delayed   sorted set
KEYS[2]  jobs      stream
ARGV[1]  group     consumer group name
ARGV[2]  entry_id  the entry that failed
ARGV[3]  run_at    score, epoch seconds
ARGV[4]  member    the job's fields with attempts + 1, compact JSON, sorted keys

Returns: 1 when the entry was still pending and the retry was recorded; 0 when
the entry was no longer pending (another worker acknowledged it after a
reclaim), in which case nothing is added, so a job is never retried twice.
]]
if redis.call('XACK', KEYS[2], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
return 1
