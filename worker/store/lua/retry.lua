#!lua
--[[ Schedule a failed job's next attempt and acknowledge the failed entry.

KEYS[1]  delayed   sorted set
KEYS[2]  jobs      stream
ARGV[1]  group     consumer group name
ARGV[2]  entry_id  the entry that failed
ARGV[3]  run_at    score, epoch seconds
ARGV[4]  member    the job's fields with attempts + 1, compact JSON, sorted keys
ARGV[5]  consumer  the settling consumer: the move lands only while the entry
                   is still its own (includes/owned.lua); '' or absent = any owner

Returns: 1 when the entry was still pending (and the consumer's) and the retry
was recorded; 0 when it was not (another worker acknowledged it after a
reclaim, or holds it now), in which case nothing is added, so a job is never
retried twice nor run a third time by a stale retry.
]]
--- @include "owned"
if not owned(KEYS[2], ARGV[1], ARGV[5] or '', ARGV[2]) then
  return 0
end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
return 1
