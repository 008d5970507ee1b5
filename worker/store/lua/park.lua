#!lua
--[[ Park an entry of a paused kind: move it from the jobs stream into `parked`, atomically.

KEYS[1]  jobs      stream
KEYS[2]  paused    hash kind -> JSON (the partition's copy of the pauses)
KEYS[3]  parked    sorted set, every score 0: members ordered by their bytes
ARGV[1]  group     consumer group name
ARGV[2]  entry_id  the delivered entry of the paused kind
ARGV[3]  kind      its kind
ARGV[4]  consumer  the parking consumer: the move lands only while the entry is still
                   its own (includes/owned.lua); '' or absent = any owner

Returns: 1 when the entry was parked; 0 when the kind is no longer paused
(resume ran since the worker last looked: run the job), nothing changed;
-1 when the entry was no longer pending, or no longer this consumer's
(another worker took it over after a reclaim, or acknowledged it), nothing
changed: a stale park never acknowledges another worker's entry.
Effects: ZADD parked (includes/parked_member.lua: kind, the entry's id,
its fields) and XACK the entry, in one script, so a job
is parked once and never both parked and run. Members sort by kind, then by
the entry's id, whoever parked them: resume puts them back in their order.
]]
--- @include "owned"
--- @include "parked_member"
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
  return 0
end
local found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #found == 0 or not owned(KEYS[1], ARGV[1], ARGV[4] or '', ARGV[2]) then
  return -1
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
local ms, seq = string.match(ARGV[2], '^(%d+)-(%d+)$')
redis.call('ZADD', KEYS[3], 0, parked_member(ARGV[3], tonumber(ms), tonumber(seq), found[1][2]))
return 1
