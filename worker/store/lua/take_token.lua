#!lua
--[[ Take a token from a throttled kind's bucket, or say when to come back.

KEYS[1]  bucket    hash throttle:<kind> (tokens, at, next): one per kind for the whole queue
ARGV[1]  now       epoch seconds (float)
ARGV[2]  per_s     the kind's rate, tokens a second (> 0)
ARGV[3]  burst     the bucket's size in tokens (>= 1)

Returns: '0' when a token was taken (start the job now); otherwise the
seconds (a decimal string) after which the job should be tried again.
The bucket refills at per_s up to burst. A job refused a token is given the
next free turn of a schedule that advances by 1/per_s with each refusal
(`next`), so refused jobs come back spread at the rate, not all at once;
turns further than 30 s ahead are capped there. The key expires after 60 s
without use.
]]
local now = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
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
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', ARGV[1], 'next', string.format('%.6f', next_turn))
redis.call('EXPIRE', KEYS[1], 60)
return reply
