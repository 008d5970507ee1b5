#!lua
--[[ Keep a live worker's claims fresh so the reclaim loop never takes them.

KEYS[1]  jobs      stream
ARGV[1]  group     consumer group name
ARGV[2]  consumer  this worker's consumer name
ARGV[3..] entry ids this worker is running

For each id still pending and owned by this consumer (includes/owned.lua),
XCLAIM ... JUSTID resets its idle time without counting a delivery. An id
that another consumer owns (or that is no longer pending) is left alone.
Returns: the number of claims refreshed.
]]
--- @include "owned"
local refreshed = 0
for i = 3, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[2], ARGV[i]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    refreshed = refreshed + 1
  end
end
return refreshed
