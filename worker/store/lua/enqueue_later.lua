#!lua
--[[ Add a job for later to `delayed`, after the jobs already due at the same moment.

KEYS[1]  delayed   the partition's `delayed` sorted set
ARGV[1]  due       run time, epoch seconds (a float's shortest text)
ARGV[2]  member    the job as compact JSON with sorted keys

Returns: the score given (text): ARGV[1], or the next free double above it (includes/later_score.lua).
Effects: one ZADD; the enqueue of a job for later without a unique key or a producer's job id
(enqueue_once.lua does the same for a guarded one).
]]
--- @include "later_score"
local score = later_score(KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], score, ARGV[2])
return score
