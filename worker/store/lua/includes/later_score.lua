-- The `delayed` score of a new job due at `due` (its text, epoch seconds), kept in enqueue order among
-- jobs due at the same moment: `delayed` sorts members of one score by their bytes (a random job id), so
-- a score already taken is passed for the next representable double above it (the step of a double near
-- today's epoch: 0.24 µs), until a free one. The run time moves 0.24 µs per job already due at that
-- moment; the order holds across producers, since the look and the add are one script.
local function later_score(delayed, due)
  local score = tonumber(due)
  while redis.call('ZCOUNT', delayed, score, score) > 0 do
    local _, exponent = math.frexp(score)
    score = score + math.ldexp(1, exponent - 53)
  end
  return string.format('%.17g', score)
end
