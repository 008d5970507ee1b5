#!lua
--[[ Take a dead entry out of the dead-letter stream for good, atomically, and record why.

KEYS[1]  dead      dead-letter stream
KEYS[2]  log       stream jobs:dead:log (the archive's record of moves out of jobs:dead)
ARGV[1]  dead_id   the dead entry to discard
ARGV[2]  batch     discard batch id (one per discard call)
ARGV[3]  by        who discards it
ARGV[4]  reason    why (required by opslib)
ARGV[5]  at        when, ISO-8601 UTC
ARGV[6]  record    '1': add a `discarded` record to the log (the archive is on); '0': do not

Returns: 1 when the entry was discarded, 0 when it is no longer there
(replayed or discarded by someone else, trimmed, or evicted). The XDEL and
the log record are one script: a replay and a discard racing on one entry
leave it in exactly one of the two states. The record carries the entry's
own fields (as `f.<name>`), so the archive gets the row even if it never saw
the entry.
]]
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return 0
end
redis.call('XDEL', KEYS[1], ARGV[1])
if ARGV[6] == '1' then
  local record = {'event', 'discarded', 'dead_id', ARGV[1], 'batch', ARGV[2], 'by', ARGV[3], 'reason', ARGV[4],
                  'at', ARGV[5]}
  local fields = found[1][2]
  for i = 1, #fields, 2 do
    record[#record + 1] = 'f.' .. fields[i]
    record[#record + 1] = fields[i + 1]
  end
  redis.call('XADD', KEYS[2], '*', unpack(record))
end
return 1
