--[[ Remove consumers that died and own nothing from the group.

KEYS[1]  jobs          stream
ARGV[1]  group         consumer group name
ARGV[2]  heartbeat_prefix  a live worker keeps the key <prefix><name>
ARGV[3]  min_idle_ms   only consumers idle at least this long are removed

A consumer is removed only when its pending count is 0 (XGROUP DELCONSUMER
would otherwise drop its pending entries) and its heartbeat key is gone.
Returns: the names removed.
]]
local removed = {}
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  local name, pending, idle = nil, 0, 0
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1] end
    if c[i] == 'pending' then pending = c[i + 1] end
    if c[i] == 'idle' then idle = c[i + 1] end
  end
  if pending == 0 and idle >= tonumber(ARGV[3])
      and redis.call('EXISTS', ARGV[2] .. name) == 0 then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    removed[#removed + 1] = name
  end
end
return removed
