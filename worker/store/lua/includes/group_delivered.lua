-- The last-delivered-id of consumer group `group` on `stream`; nil without the stream or the group.
local function group_delivered(stream, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then
    return nil
  end
  local last = nil
  for _, g in ipairs(groups) do
    local name, delivered = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
    end
    if name == group then last = delivered end
  end
  return last
end
