#!lua
--[[ Add a job unless its producer's job id was enqueued within the window, or its unique key is held.

KEYS[1]  target    `jobs` (stream) when ARGV[3] is '', else `delayed` (sorted set)
KEYS[2]  mark      `enqueued:<job_id>` when ARGV[1] holds 'm' (a job id of the producer's)
KEYS[2 or 3] lock  `unique:<kind>:<unique_key>` when ARGV[1] holds 'u'
KEYS[n..n+2]       `fair:queue`, `fair:last`, `fair:clock` after those when ARGV[1] holds 'f' (a job
                   for now with a fair key: it waits for its key's turn, as fair_enqueue.lua)
ARGV[1]  flags     'm', 'u', 'mu', each with 'f' or not
ARGV[2]  mark_s    how long the mark lasts, seconds (the idempotency window)
ARGV[3]  due       run time, epoch seconds, for `delayed` (after the jobs due then:
                   includes/later_score.lua); '' to add to `jobs` now
ARGV[4]  job_id    the job's id, kept in the lock as its holder
ARGV[5]  hold_ms   unique_for in milliseconds: the lock is also held that long from now; '' none
ARGV[6]  member    the job as compact JSON (sorted keys) for `delayed` or `fair:queue`, else ''
ARGV[7..] field, value pairs of the job for `jobs` (when ARGV[3] is '' and no 'f'); with 'f': the
         job's fair key, then the consumer group of `jobs`

Returns: {1, ref} when the job was added (ref: its entry id, its member, or a fair job's job id, since its
entry id comes with its turn), {0, ref} when it was
not: ref is what the first enqueue returned (the mark's value) or the holder's (the lock's `ref`).
Effects: the check and the add in one script, so that two producers racing never both add. The
mark is SET with EX mark_s: a repeat within the window adds nothing and does not move the first
job's due time. The lock is a hash (job, ref, kind, at, and `until` with hold_ms) without expiry:
the settling move of the job's terminal state releases it (includes/release_unique.lua).
]]
--- @include "delayed_entry"
--- @include "group_delivered"
--- @include "fair_turns"
--- @include "later_score"
local flags = ARGV[1]
local mark, lock = nil, nil
local n = 2
if string.find(flags, 'm', 1, true) then
  mark = KEYS[n]
  n = n + 1
end
if string.find(flags, 'u', 1, true) then
  lock = KEYS[n]
  n = n + 1
end
local fair = string.find(flags, 'f', 1, true) ~= nil
if mark then
  local first = redis.call('GET', mark)
  if first then
    return {0, first}
  end
end
if lock then
  local holder = redis.call('HGET', lock, 'ref')
  if holder then
    return {0, holder}
  end
end
local ref
if fair then
  fair_place(KEYS[n], KEYS[n + 1], KEYS[n + 2], ARGV[7], ARGV[6])
  local waiting = undelivered(KEYS[1], ARGV[8], 1)
  if waiting ~= nil and #waiting == 0 then
    fair_move(KEYS[1], KEYS[n], KEYS[n + 1], KEYS[n + 2], 1)
  end
  ref = ARGV[4]
elseif ARGV[3] == '' then
  ref = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 7))
else
  redis.call('ZADD', KEYS[1], later_score(KEYS[1], ARGV[3]), ARGV[6])
  ref = ARGV[6]
end
if mark then
  redis.call('SET', mark, ref, 'EX', ARGV[2])
end
if lock then
  local clock = redis.call('TIME')
  local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  redis.call('HSET', lock, 'job', ARGV[4], 'ref', ref, 'at', now_ms)
  if ARGV[5] ~= '' then
    redis.call('HSET', lock, 'until', now_ms + tonumber(ARGV[5]))
  end
end
return {1, ref}
