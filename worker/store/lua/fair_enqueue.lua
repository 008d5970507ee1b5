#!lua
--[[ Enqueue a job with a fair key: it waits in `fair:queue` for its key's turn (includes/fair_turns.lua).

KEYS[1]  jobs         stream
KEYS[2]  fair:queue   zset: score = turn, member = job fields as JSON
KEYS[3]  fair:last    hash: fair key -> its last job's turn
KEYS[4]  fair:clock   string: the turn of the job moved onto jobs last
ARGV[1]  group        consumer group name (workers)
ARGV[2]  key          the job's fair key
ARGV[3]  member       the job's fields as JSON (sorted keys, compact: worker.store.wire.encode_member)

Returns: 1 when the job (or another key's, whichever had the earliest turn) was
moved onto `jobs` at once because nothing there was waiting for a worker (so a
worker blocked in its read wakes, and its fair feeder takes over), else 0.
]]
--- @include "delayed_entry"
--- @include "group_delivered"
--- @include "fair_turns"
fair_place(KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
local waiting = undelivered(KEYS[1], ARGV[1], 1)
if waiting ~= nil and #waiting == 0 then
  return fair_move(KEYS[1], KEYS[2], KEYS[3], KEYS[4], 1)
end
return 0
