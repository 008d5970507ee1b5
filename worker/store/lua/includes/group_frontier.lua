-- The oldest id of `stream` that consumer group `group` may still need: its oldest pending entry, or the
-- id after its last-delivered-id when nothing is pending. Everything below it was delivered and
-- acknowledged. nil without the stream or the group. The last-delivered-id is read before the PEL, in
-- the caller's script, so an entry delivered concurrently never falls below the frontier. Needs the
-- include group_delivered before it.
local function group_frontier(stream, group)
  local last = group_delivered(stream, group)
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
