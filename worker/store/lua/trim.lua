#!lua
--[[ Trim the jobs stream below the oldest entry anyone may still need.

KEYS[1]  jobs     stream
ARGV[1]  group    consumer group name

Keeps every entry that is undelivered (after the group's last-delivered-id)
or pending (at or after the oldest id in the group's PEL). Everything older
has been acknowledged and is removed with XTRIM MINID.
Returns: the number of entries removed.
The last-delivered-id is read before the PEL inside one script, so an entry
delivered concurrently can never fall below the trim point.
]]
--- @include "group_delivered"
--- @include "group_frontier"
local minid = group_frontier(KEYS[1], ARGV[1])
if minid == nil then
  return 0
end
return redis.call('XTRIM', KEYS[1], 'MINID', minid)
