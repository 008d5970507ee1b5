#!lua
--[[ Take a token from a throttled kind's bucket, or say when to come back.

KEYS[1]  bucket     hash throttles:<kind> (tokens, at, next): one per kind for the whole queue
KEYS[2]  throttles  hash kind -> JSON with `per_s`: opslib's rates (they override the default)
ARGV[1]  now        epoch seconds (float)
ARGV[2]  kind       the job's kind
ARGV[3]  default    the kind's own rate_limit (jobs a second), or '' for none
ARGV[4]  burst_s    the bucket holds this many seconds of tokens (at least one token)

Returns: '0' when the job may start now (a token was taken, or the kind has
no rate any more: the rate is read here, so a throttle set, changed or lifted
is honoured at once); otherwise the seconds (a decimal string) after which
the job should be tried again. The bucket refills at the rate up to its size.
A job refused a token is given the next free turn of a schedule that advances
by 1/rate with each refusal (`next`), so refused jobs come back spread at the
rate, not all at once; turns further than 30 s ahead are capped there. The
bucket expires after 60 s without use.
]]
local rate = tonumber(ARGV[3])
local setting = redis.call('HGET', KEYS[2], ARGV[2])
if setting then
  local ok, decoded = pcall(cjson.decode, setting)
  if ok and type(decoded) == 'table' and tonumber(decoded['per_s']) then
    rate = tonumber(decoded['per_s'])
  end
end
if not rate or rate <= 0 then
  return '0'
end
local now = tonumber(ARGV[1])
local burst = math.max(1, rate * tonumber(ARGV[4]))
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'next')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
local next_turn = tonumber(state[3]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local reply = '0'
if tokens >= 1 then
  tokens = tokens - 1
else
  local turn = math.max(next_turn, now + (1 - tokens) / rate)
  turn = math.min(turn, now + 30)
  next_turn = turn + 1 / rate
  reply = string.format('%.3f', turn - now)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', ARGV[1],
  'next', string.format('%.6f', next_turn))
redis.call('EXPIRE', KEYS[1], 60)
return reply
