#!lua
--[[ Trim the cancel marks that have done their work: one HSCAN step of a partition's `cancels`.

KEYS[1]  cancels   hash: job id (the entry id when it has none) -> JSON mark (worker/store/cancels.py)
KEYS[2]  jobs      stream, consumer group `workers`
ARGV[1]  cutoff    ISO-8601 UTC (as now_iso writes it): marks made before it may go
ARGV[2]  cursor    the HSCAN cursor ('0' to start)
ARGV[3]  count     the HSCAN COUNT of this step

Returns: {next cursor ('0' when the scan is done), marks removed}.
Effects: HDEL of each scanned mark older than the cutoff whose entry no
worker holds (a `removed` job never started; a `cancelled` one whose entry is
no longer pending was acknowledged), and of a mark that is not JSON. A
`cancelled` mark whose entry is still pending stays, however old: the worker
running it may have missed the announcement and needs it at its next claim
refresh. Each mark is judged and removed in this script, so a worker's read
of it and this trim never disagree about it.
]]
local reply = redis.call('HSCAN', KEYS[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local fields, removed = reply[2], 0
for i = 1, #fields, 2 do
  local ok, mark = pcall(cjson.decode, fields[i + 1])
  local gone = not ok or type(mark) ~= 'table' or type(mark['at']) ~= 'string'
  if not gone and mark['at'] < ARGV[1] then
    local entry = type(mark['entry_id']) == 'string' and mark['entry_id'] or ''
    local pending = {}
    if mark['status'] == 'cancelled' and entry ~= '' then
      pending = redis.pcall('XPENDING', KEYS[2], 'workers', entry, entry, 1)  -- an error: no group, none held
    end
    gone = pending['err'] ~= nil or #pending == 0
  end
  if gone then
    redis.call('HDEL', KEYS[1], fields[i])
    removed = removed + 1
  end
end
return {reply[1], removed}
