-- A delayed member as XADD's field-value list: the member's JSON object of strings (numbers pass, as
-- their text), or, when the member is not one, the single field `malformed_delayed` holding it, for the
-- consumer's edge to dead-letter. A kind that is not a string (a number, a list, an object, null) is
-- refused so too: it would otherwise reach the stream as Lua's text for it ("table: 0x...").
local function delayed_entry(member)
  local ok, fields = pcall(cjson.decode, member)
  local args = {}
  if ok and type(fields) == 'table' and type(fields['kind']) == 'string' then
    for k, v in pairs(fields) do
      local t = type(v)
      if t ~= 'string' and t ~= 'number' then
        return {'malformed_delayed', member}
      end
      args[#args + 1] = tostring(k)
      args[#args + 1] = tostring(v)
    end
  end
  if #args == 0 then
    args = {'malformed_delayed', member}
  end
  return args
end
