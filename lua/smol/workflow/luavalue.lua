--[[
A step's return value as Lua text and back, exactly (integers stay
integers, floats keep every bit, any string and any key of those types):
what the cache and --resume keep of a step. JSON cannot say 3 vs 3.0, nor
keys that are not strings.

  local text = luavalue.encode({bin = "app", n = 3, [1.5] = true})
  local v = luavalue.decode(text)

Only nil, booleans, numbers, strings and tables of those (no metatable, no
cycle) can be kept; encode returns nil and why for anything else. decode
loads the text in an empty environment, text only. The text comes from
the cache directory, which is trusted as the workspace is (it also holds
the outputs put back into sessions).
]]
local M = {}

local MAX_DEPTH = 64

local encode_value

local function number_text(v)
  -- "-9223372036854775808" would read back as a float (minus applied to
  -- a literal too big for an integer); the hex literal wraps to it.
  if v == math.mininteger then return "0x8000000000000000" end
  if math.type(v) == "integer" then return string.format("%d", v) end
  if v ~= v then return "(0/0)" end
  if v == math.huge then return "(1/0)" end
  if v == -math.huge then return "(-1/0)" end
  return string.format("%a", v)
end

local function key_order(a, b)
  if type(a) ~= type(b) then return type(a) < type(b) end
  if type(a) == "boolean" then return (not a) and b end
  return a < b
end

local function encode_table(t, depth, active)
  if getmetatable(t) ~= nil then return nil, "a table with a metatable" end
  if active[t] then return nil, "a table that contains itself" end
  if depth > MAX_DEPTH then return nil, "nested deeper than " .. MAX_DEPTH end
  active[t] = true
  local keys = {}
  for k in pairs(t) do
    if type(k) == "number" and k ~= k then active[t] = nil; return nil, "a NaN key" end
    keys[#keys + 1] = k
  end
  table.sort(keys, key_order)
  local parts = {}
  for i, k in ipairs(keys) do
    local ktext, why = encode_value(k, depth + 1, active)
    local vtext, vwhy = encode_value(t[k], depth + 1, active)
    if not ktext or not vtext then active[t] = nil; return nil, why or vwhy end
    parts[i] = "[" .. ktext .. "]=" .. vtext
  end
  active[t] = nil
  return "{" .. table.concat(parts, ",") .. "}"
end

function encode_value(v, depth, active)
  local t = type(v)
  if t == "nil" or t == "boolean" then return tostring(v) end
  if t == "number" then return number_text(v) end
  if t == "string" then return string.format("%q", v) end
  if t == "table" then return encode_table(v, depth, active) end
  return nil, "a " .. t
end

--- The Lua text of v, or nil and what cannot be kept ("a function").
function M.encode(v)
  return encode_value(v, 0, {})
end

--- The value encode wrote; raises when the text is not one.
function M.decode(text)
  if type(text) ~= "string" then error("not a kept value", 2) end
  local chunk, err = load("return " .. text, "=value", "t", {})
  if not chunk then error("not a kept value: " .. err, 2) end
  return chunk()
end

return M
