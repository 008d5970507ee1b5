#!lua
--[[ Enqueue one tick of a schedule, once, whatever the number of workers.

KEYS[1]  lock      sched:<name>:<tick-epoch>, the tick's own lock
KEYS[2]  jobs      stream
ARGV[1]  owner     the worker that takes the lock (its value, for people reading it)
ARGV[2]  ttl_s     the lock's lifetime: longer than the catch-up window plus the
                   clock skew plus one interval, so no worker can still see the
                   tick as due once the lock is gone
ARGV[3..] field, value pairs of the job (kind, job_id, attempts, scheduled_for, ...)

Returns: the new entry's id, or false when another worker already took this tick.
The lock and the XADD happen together, so a crash cannot take a tick without
enqueueing it.
]]
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then
  return false
end
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
return redis.call('XADD', KEYS[2], '*', unpack(fields))
