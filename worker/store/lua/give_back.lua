#!lua
--[[ Give entries this consumer will not run (or run no more) back to the reclaim loop, only those it owns.

KEYS[1]  jobs      stream
ARGV[1]  group     consumer group name
ARGV[2]  consumer  this worker's consumer name
ARGV[3]  idle_ms   the idle time each entry is given (RECLAIM_IDLE_MS: reclaimed at once)
ARGV[4..] entry ids

For each id still pending and owned by this consumer (includes/owned.lua),
XCLAIM ... IDLE idle_ms JUSTID sets its idle time without counting a
delivery, so another worker's reclaim takes it as soon as it is idle long
enough. An id that another consumer owns (a reclaim took it over while this
worker's claim was idle) or that is no longer pending is left alone: a bare
XCLAIM would take it back from the worker running it and have it run again.
Returns: the number of entries given back.
]]
--- @include "owned"
local given = 0
for i = 4, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[2], ARGV[i]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
    given = given + 1
  end
end
return given
