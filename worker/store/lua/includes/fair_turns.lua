-- Start-time fair queueing over one zset (fair_enqueue, fair_dispatch). Each job waiting for its turn is a
-- member of `queue` (its fields as a JSON object, like a delayed member) scored by its turn: one past the
-- later of the clock (the turn of the job moved onto `jobs` last) and its key's last turn (`last`, fair
-- key -> turn). A key's jobs keep their order; a key that was idle starts at the current turn, so it gets
-- no credit for its idle time and waits behind no other key's backlog; keys with work take one turn each,
-- round-robin. Needs the includes group_delivered and delayed_entry before it.
local function fair_place(queue, last, clock, key, member)
  local now = tonumber(redis.call('GET', clock) or '0')
  local prev = tonumber(redis.call('HGET', last, key) or '0')
  local turn = math.max(now, prev) + 1
  redis.call('ZADD', queue, turn, member)
  redis.call('HSET', last, key, turn)
end

-- The undelivered entries of `stream` for `group`, up to `limit` ({id, fields} each); nil without the
-- group (no worker has read yet: nothing is moved then).
local function undelivered(stream, group, limit)
  local delivered = group_delivered(stream, group)
  if delivered == nil then
    return nil
  end
  return redis.call('XRANGE', stream, '(' .. delivered, '+', 'COUNT', limit)
end

-- Move the `count` jobs of the earliest turns from `queue` onto `stream`; returns how many moved. A key
-- whose last job moved leaves `last` (the hash holds only keys with work, and stale keys left by a cancel).
local function fair_move(stream, queue, last, clock, count)
  local popped = redis.call('ZPOPMIN', queue, count)
  for i = 1, #popped, 2 do
    local args = delayed_entry(popped[i])
    local key = ''
    for j = 1, #args, 2 do
      if args[j] == 'fair_key' then key = args[j + 1] end
    end
    redis.call('XADD', stream, '*', unpack(args))
    redis.call('SET', clock, popped[i + 1])
    if tonumber(redis.call('HGET', last, key) or '0') <= tonumber(popped[i + 1]) then
      redis.call('HDEL', last, key)
    end
  end
  return #popped / 2
end
