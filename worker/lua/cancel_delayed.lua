#!lua
--[[ Cancel one delayed job: take its member out of delayed before a worker promotes it.

KEYS[1]  delayed   sorted set; member = the job's fields as JSON
ARGV[1]  member    the job's member in delayed, byte for byte

Returns: the member's run time (its score, as a string) when it was removed,
or false when it is no longer there (a worker promoted it since, so the job
runs; or someone else ran or cancelled it). Promotion takes a member out in
its own script, so a job is either cancelled here or promoted, never both.
]]
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return false
end
redis.call('ZREM', KEYS[1], ARGV[1])
return score
