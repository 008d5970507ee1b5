#!lua
--[[ Remove consumers that died and own nothing from the group.

KEYS[1]  jobs          stream
ARGV[1]  group         consumer group name
ARGV[2]  min_idle_ms   only consumers idle at least this long are removed
ARGV[3..] candidates   consumer names whose heartbeat key the caller found gone

A candidate is removed only when, checked here, its pending count is 0
(XGROUP DELCONSUMER would otherwise drop its pending entries) and it has been
idle at least min_idle_ms. The heartbeat keys live in other slots of a
cluster, so the caller reads them; a worker that comes back between that
read and this script owns nothing, and its next read recreates the consumer.
Returns: the names removed.
]]
local candidates = {}
for i = 3, #ARGV do
  candidates[ARGV[i]] = true
end
local removed = {}
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  local name, pending, idle = nil, 0, 0
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1] end
    if c[i] == 'pending' then pending = c[i + 1] end
    if c[i] == 'idle' then idle = c[i + 1] end
  end
  if candidates[name] and pending == 0 and idle >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    removed[#removed + 1] = name
  end
end
return removed
