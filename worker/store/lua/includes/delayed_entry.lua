-- A delayed member as XADD's field-value list: the member's JSON object of strings, or, when the member
-- is not one, the single field `malformed_delayed` holding it, for the consumer's edge to dead-letter.
local function delayed_entry(member)
  local ok, fields = pcall(cjson.decode, member)
  local args = {}
  if ok and type(fields) == 'table' then
    for k, v in pairs(fields) do
      args[#args + 1] = tostring(k)
      args[#args + 1] = tostring(v)
    end
  end
  if #args == 0 then
    args = {'malformed_delayed', member}
  end
  return args
end
