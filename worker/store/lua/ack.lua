#!lua flags=allow-oom
--[[ Acknowledge the entries this consumer ran to success, only those it still owns (the fenced XACK).

KEYS[1]  jobs      stream
ARGV[1]  group     consumer group name
ARGV[2]  consumer  this worker's consumer name
ARGV[3..] entry ids whose handlers returned

Returns: the ids NOT acknowledged (stale: no longer pending, or another
consumer's since a reclaim took them over), an empty array as a rule.
Effects: XACK of the ids still pending and owned by the consumer
(includes/owned.lua), so a worker whose claim was taken over changes
nothing; the loop sends this with its next XREADGROUP, one round trip.
Flag allow-oom: a full Redis (maxmemory, noeviction) still takes it, as it
takes a bare XACK, which frees memory rather than using it.
]]
--- @include "owned"
local acked, stale = {}, {}
for i = 3, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[2], ARGV[i]) then
    acked[#acked + 1] = ARGV[i]
  else
    stale[#stale + 1] = ARGV[i]
  end
end
for i = 1, #acked, 1000 do
  redis.call('XACK', KEYS[1], ARGV[1], unpack(acked, i, math.min(i + 999, #acked)))
end
return stale
