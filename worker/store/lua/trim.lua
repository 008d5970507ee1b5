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
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then
  return 0
end
local last = nil
for _, g in ipairs(groups) do
  local name, delivered = nil, nil
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] end
    if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
  end
  if name == ARGV[1] then last = delivered end
end
if last == nil then
  return 0
end
local ms, seq = string.match(last, '^(%d+)-(%d+)$')
local minid = ms .. '-' .. tostring(tonumber(seq) + 1)
local summary = redis.call('XPENDING', KEYS[1], ARGV[1])
if summary[1] > 0 then
  minid = summary[2]
end
return redis.call('XTRIM', KEYS[1], 'MINID', minid)
