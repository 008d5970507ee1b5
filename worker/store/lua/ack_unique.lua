#!lua flags=allow-oom
--[[ Acknowledge one entry this consumer ran to success and release its job's unique lock, atomically.

KEYS[1]  jobs      stream
KEYS[2]  lock      `unique:<kind>:<unique_key>` of the job (includes/release_unique.lua)
ARGV[1]  group     consumer group name
ARGV[2]  consumer  this worker's consumer name
ARGV[3]  entry_id  the entry whose handler returned
ARGV[4]  job_id    the job's id: the lock is released only while this job holds it

Returns: 1 when acknowledged (and the lock released, if the job held it); 0 when the entry is no longer
this consumer's (the fence, includes/owned.lua): nothing changes, the lock stays with the job.
Flag allow-oom: as ack.lua, it frees memory rather than using it.
]]
--- @include "owned"
--- @include "release_unique"
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
release_unique(KEYS[2], ARGV[4])
return 1
