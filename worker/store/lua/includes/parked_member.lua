-- A parked job as a member of `parked` (every score 0, so members sort by their bytes): its kind, NUL,
-- `order` (two zero-padded numbers: the place it had, an entry id or a promotion time), NUL, then its
-- fields as a JSON array of name, value, ... Members sort by kind, then by their place.
local function parked_member(kind, ms, seq, fields)
  return kind .. '\0' .. string.format('%020d-%020d', ms, seq) .. '\0' .. cjson.encode(fields)
end
