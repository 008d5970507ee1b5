#!lua
--[[ Keep `jobs` topped up from `fair:queue`, round-robin over fair keys, without a deep backlog on `jobs`.

KEYS[1]  jobs         stream
KEYS[2]  fair:queue   zset: score = turn, member = job fields as JSON
KEYS[3]  fair:last    hash: fair key -> its last job's turn
KEYS[4]  fair:clock   string: the turn of the job moved onto jobs last
ARGV[1]  group        consumer group name (workers)
ARGV[2]  target       how many undelivered entries `jobs` should hold (about the slots that read it)
ARGV[3]  batch        the most entries spilled in one call

While any fair job waits, undelivered entries of `jobs` beyond the first
`target` that carry no `fair_key` field (jobs enqueued without a key) are
spilled into `fair:queue` under the key "" (their field `fair_key` set to ""),
so that jobs without a key share one key; an entry that carries the field (a
fair job moved here, or one retried, delayed or replayed) is never moved
again, so a feeder with a smaller target never reorders another's. Then jobs of
the earliest turns are moved onto `jobs` until it holds `target` undelivered
entries. Only
undelivered entries are spilled (XDEL after the group's last-delivered id:
none is pending), each re-added whole in the same script, so none is lost or
doubled. Nothing is done while `fair:queue` is empty or before the group exists.

Returns: {moved, spilled, waiting}: jobs moved onto `jobs`, entries spilled (up to batch),
and the jobs still in `fair:queue` (0: the caller may rest until one comes).
]]
--- @include "delayed_entry"
--- @include "group_delivered"
--- @include "fair_turns"
if redis.call('ZCARD', KEYS[2]) == 0 then
  return {0, 0, 0}
end
local target = tonumber(ARGV[2])
local waiting = undelivered(KEYS[1], ARGV[1], target + tonumber(ARGV[3]))
if waiting == nil then
  return {0, 0, redis.call('ZCARD', KEYS[2])}
end
local spilled = 0
for i = target + 1, #waiting do
  local id, flat = waiting[i][1], waiting[i][2]
  local fields, keyed = {}, false
  for j = 1, #flat, 2 do
    fields[flat[j]] = flat[j + 1]
    if flat[j] == 'fair_key' then keyed = true end
  end
  if not keyed then
    fields['fair_key'] = ''
    fair_place(KEYS[2], KEYS[3], KEYS[4], '', cjson.encode(fields))
    redis.call('XDEL', KEYS[1], id)
    spilled = spilled + 1
  end
end
local moved = 0
if #waiting < target then
  moved = fair_move(KEYS[1], KEYS[2], KEYS[3], KEYS[4], target - #waiting)
end
return {moved, spilled, redis.call('ZCARD', KEYS[2])}
