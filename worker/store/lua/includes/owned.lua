-- The fence of every settle: true when `id` is pending in `group` of `stream` and, unless `consumer` is
-- '', still owned by `consumer` (a worker whose claim was taken over by a reclaim owns it no more).
local function owned(stream, group, consumer, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  return #p == 1 and (consumer == '' or p[1][2] == consumer)
end
