-- Release the unique lock `lock` held by job `job_id` (the settle of its terminal state): deleted, or,
-- while its `until` (unique_for) is ahead, left to expire then. A lock another job holds (taken after
-- this one's `until` passed) is left alone. Returns 1 when released, 0 when not this job's.
local function release_unique(lock, job_id)
  if redis.call('HGET', lock, 'job') ~= job_id then
    return 0
  end
  local hold = tonumber(redis.call('HGET', lock, 'until') or '0')
  local clock = redis.call('TIME')
  local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  if hold > now_ms then
    redis.call('PEXPIREAT', lock, hold)
  else
    redis.call('DEL', lock)
  end
  return 1
end
