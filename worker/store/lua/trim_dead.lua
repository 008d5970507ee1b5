#!lua
--[[ Trim jobs:dead to about DEAD_MAXLEN, removing only entries already archived.

KEYS[1]  dead      dead-letter stream (consumer group `archive`)
KEYS[2]  evicted   counter of dead entries evicted by the hard ceiling (read only)
ARGV[1]  group     the archiver's consumer group name
ARGV[2]  maxlen    DEAD_MAXLEN: keep at least this many recent entries
ARGV[3]  step      remove at most this many entries in one call

The archive frontier is the group's oldest pending entry, or the entry after
its last-delivered-id when nothing is pending: every entry below it has been
written to PostgreSQL and acknowledged. The oldest entries beyond `maxlen`
that lie below the frontier are removed (XTRIM MINID); nothing at or above it
is, so while PostgreSQL is away the stream grows past `maxlen` (bury's
`MAXLEN ~ DEAD_HARD_MAXLEN` is then the only limit, and it counts what it
evicts). Without the group (no archiver has run yet) nothing is removed.
Returns: {entries removed, the evicted counter's value}.
]]
--- @include "group_delivered"
--- @include "group_frontier"
local evicted = tonumber(redis.call('GET', KEYS[2]) or '0')
local excess = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[2])
if excess <= 0 then
  return {0, evicted}
end
local frontier = group_frontier(KEYS[1], ARGV[1])
if frontier == nil then
  return {0, evicted}
end
local archived = redis.call('XRANGE', KEYS[1], '-', '(' .. frontier, 'COUNT', math.min(excess, tonumber(ARGV[3])))
if #archived == 0 then
  return {0, evicted}
end
local ms, seq = string.match(archived[#archived][1], '^(%d+)-(%d+)$')
return {redis.call('XTRIM', KEYS[1], 'MINID', ms .. '-' .. tostring(tonumber(seq) + 1)), evicted}
