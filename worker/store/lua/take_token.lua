#!lua
--[[ Give a throttled kind's job its turn: now, or a reserved time to come back at.

KEYS[1]  bucket     hash throttles:<kind> (tat, gen, rate, n, late): one per kind for the whole queue
KEYS[2]  throttles  hash kind -> JSON with `per_s`: opslib's rates (they override the default)
KEYS[3]  ran        sorted set throttles:ran:<kind>: the starts of the last second (score: start time)
ARGV[1]  kind       the job's kind
ARGV[2]  default    the kind's own rate_limit (jobs a second), or '' for none
ARGV[3]  ticket     the turn the job already holds (its `throttle_turn` field, '<gen>:<turn>'), or ''
ARGV[4]  hold_s     a turn due within this many seconds is the caller's to wait for (it is a start)

Returns {wait, ticket}: wait is '0' when the job may start now (its turn has
come, or the kind has no rate any more: the rate is read here, so a throttle
set, changed or lifted is honoured at once); otherwise the seconds (a decimal
string) until its turn, and ticket the turn it holds (to be stored in the
job, so that it starts then without asking for another).

A schedule, not a bucket (the virtual scheduling form of GCRA): `tat` is the
next free turn, and each job without a valid ticket takes turn
max(now, tat) and moves `tat` on by 1/rate. So jobs start 1/rate apart in
the order they asked, a job that comes back a few milliseconds early keeps
its turn (it is told the rest of its wait, never sent to the back), and no
turn is lost while the jobs holding the next ones are on their way. The
clock is Redis's TIME, the one that promote compares the deferred jobs'
scores with. A ticket is valid while its generation is the bucket's (a new
rate, or opslib deleting the bucket, starts a new generation and so a new
schedule); an invalid one takes a new turn. A valid ticket that comes late
(a long stream ahead of it) starts at once (counted from its turn while
less than 10 ms or half an interval late, so that the starts on record stay
1/rate apart however the workers' delays vary). The hard bound is `ran`: every
start (now, or held for within hold_s) is recorded there, and one that would
make the second before it hold more than the rate plus one waits until that
second's first start has aged out: a job with a ticket keeps it and comes
back then, later ones 1/rate after each other (`late`); one without takes
the next turn from then. So a pile of late turns brought back at once (no
worker was up, a long stream ahead of them) starts one second's worth and
comes back spread at the rate. While the present's turns go unused (no
start for an interval and 15 ms, two fewer than the rate in the last
second: their jobs are behind a long stream), a job without a ticket starts
in the gap, taking no turn. `ran` keeps one second; the bucket lives 60 s
past its last turn.
]]
local rate = tonumber(ARGV[2])
local setting = redis.call('HGET', KEYS[2], ARGV[1])
if setting then
  local ok, decoded = pcall(cjson.decode, setting)
  if ok and type(decoded) == 'table' and tonumber(decoded['per_s']) then
    rate = tonumber(decoded['per_s'])
  end
end
if not rate or rate <= 0 then
  return {'0', ''}
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local rate_text = string.format('%.17g', rate)
local state = redis.call('HMGET', KEYS[1], 'tat', 'gen', 'rate')
local tat = tonumber(state[1])
local gen = state[2]
if not tat or not gen or state[3] ~= rate_text then
  tat = now
  gen = clock[1] .. string.format('%06d', tonumber(clock[2]))
end
local hold_s = tonumber(ARGV[4])
local turn = nil
local sep = string.find(ARGV[3], ':', 1, true)
if sep and string.sub(ARGV[3], 1, sep - 1) == gen then
  turn = tonumber(string.sub(ARGV[3], sep + 1))
  if turn and turn >= tat then
    turn = nil
  elseif turn and now - turn >= math.min(0.5 / rate, 0.01) then
    turn = now  -- late: it starts now, and counts from now
  end
end
if not turn or turn - now <= hold_s then
  -- a start (now, or held for): only while the second before it holds no more than the rate
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 1)
  local at = turn or math.max(now, tat)
  local since = '(' .. string.format('%.6f', at - 1)
  local window = redis.call('ZRANGEBYSCORE', KEYS[3], since, '+inf', 'LIMIT', 0, 1)
  if #window > 0 and redis.call('ZCOUNT', KEYS[3], since, '+inf') >= rate + 1 then
    local frees = tonumber(string.match(window[1], '^[^:]+')) + 1
    if turn then  -- a ticket keeps its place: back once that second's first start is a second old, 1/rate apart
      turn = math.max(frees, tonumber(redis.call('HGET', KEYS[1], 'late')) or 0)
      redis.call('HSET', KEYS[1], 'late', string.format('%.6f', turn + 1 / rate))
    else
      tat = math.max(tat, frees)
    end
  end
end
local idle_since = '(' .. string.format('%.6f', now - 1 / rate - 0.015)
if not turn and tat > now + hold_s and redis.call('ZCOUNT', KEYS[3], idle_since, '+inf') == 0
    and redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%.6f', now - 1), '+inf') <= rate - 2 then
  turn = now  -- the turns are taken but their jobs are 15 ms late or more (a long stream ahead): use the gap
end
if not turn then
  turn = math.max(now, tat)
  tat = turn + 1 / rate
  redis.call('HSET', KEYS[1], 'tat', string.format('%.6f', tat), 'gen', gen, 'rate', rate_text)
  redis.call('EXPIRE', KEYS[1], math.ceil(tat - now) + 60)
end
if turn - now <= hold_s then
  local at = string.format('%.6f', turn)
  redis.call('ZADD', KEYS[3], at, at .. ':' .. redis.call('HINCRBY', KEYS[1], 'n', 1))
  redis.call('EXPIRE', KEYS[3], 2)
end
if turn <= now then
  return {'0', ''}
end
return {string.format('%.6f', turn - now), gen .. ':' .. string.format('%.6f', turn)}
