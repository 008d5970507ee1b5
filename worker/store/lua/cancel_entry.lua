#!lua
--[[ Cancel one entry of jobs: remove it while no worker has read it, else mark its job for the worker.

KEYS[1]  jobs      stream, consumer group `workers`
KEYS[2]  cancels   hash: job id (the entry id when it has none) -> JSON mark
ARGV[1]  entry_id
ARGV[2]  mark      JSON object: by, reason, at, batch
ARGV[3]  dry       "1": change nothing, say what would be done
KEYS[3]  lock      optional: the job's unique lock, released when the entry is removed (not when a
                   worker runs it: its settle releases it; includes/release_unique.lua)

Returns: {status, job_id}; status is `removed` (not delivered yet: XDEL, it
never starts), `cancelled` (pending to a worker: its mark tells the worker to
stop it), `finished` (delivered and acknowledged: nothing to do) or `missing`
(no such entry). A dry run returns `would remove` / `would cancel` instead.
Effects: XDEL of an undelivered entry, and HSET of the mark (with its status)
for a removed or cancelled one, in one script, so a worker's XREADGROUP and
this call never both take the entry: it runs, or it is removed.
]]
--- @include "release_unique"
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return {'missing', ''}
end
local fields, job_id = found[1][2], ''
for i = 1, #fields, 2 do
  if fields[i] == 'job_id' or (fields[i] == 'outbox_id' and job_id == '') then
    job_id = fields[i + 1]
  end
end
local function order(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local last = nil
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local g = {}
  for i = 1, #group, 2 do g[group[i]] = group[i + 1] end
  if g['name'] == 'workers' then last = g['last-delivered-id'] end
end
local status = 'removed'  -- no group yet: no worker has read anything
if last and #redis.call('XPENDING', KEYS[1], 'workers', ARGV[1], ARGV[1], 1) > 0 then
  status = 'cancelled'
elseif last then
  local ms, seq = order(ARGV[1])
  local last_ms, last_seq = order(last)
  if ms < last_ms or (ms == last_ms and seq <= last_seq) then
    status = 'finished'
  end
end
if ARGV[3] == '1' then
  if status == 'removed' then return {'would remove', job_id} end
  if status == 'cancelled' then return {'would cancel', job_id} end
  return {status, job_id}
end
if status == 'finished' then
  return {status, job_id}
end
if status == 'removed' then
  redis.call('XDEL', KEYS[1], ARGV[1])
  if KEYS[3] then
    release_unique(KEYS[3], job_id)
  end
end
local mark = cjson.decode(ARGV[2])
mark['status'] = status
mark['entry_id'] = ARGV[1]
redis.call('HSET', KEYS[2], job_id ~= '' and job_id or ARGV[1], cjson.encode(mark))
return {status, job_id}
