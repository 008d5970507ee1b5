-- The oldest id of `stream` that consumer group `group` may still need: its oldest pending entry, or the
-- id after its last-delivered-id when nothing is pending. Everything below it was delivered and
-- acknowledged. nil without the stream or the group. The last-delivered-id is read before the PEL, in
-- the caller's script, so an entry delivered concurrently never falls below the frontier.
local function group_frontier(stream, group)
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
  if last == nil then
    return nil
  end
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  local frontier = ms .. '-' .. tostring(tonumber(seq) + 1)
  local summary = redis.call('XPENDING', stream, group)
  if summary[1] > 0 then
    frontier = summary[2]
  end
  return frontier
end
