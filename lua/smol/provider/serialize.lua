-- Writes Lua values as Lua source, so a fake provider's behaviours (data and
-- functions) can be handed to the provider process that runs them.
--
-- Functions travel as bytecode (string.dump) with their upvalues: a module
-- (a value found in package.loaded) is re-required on the other side, `_ENV`
-- becomes the provider's environment, anything else is copied by value as
-- it is at the time of serialization.
local cjson = require "cjson"

local M = {}

local function module_name_of(value)
  for name, loaded in pairs(package.loaded) do
    if loaded == value and type(name) == "string" and name ~= "_G" then return name end
  end
end

local serialize

local function serialize_table(t, where, seen)
  if seen[t] then error(("%s: a table that contains itself cannot be copied"):format(where), 0) end
  seen[t] = true
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) < type(b)
  end)
  local parts = {}
  for _, k in ipairs(keys) do
    local key_where = where .. "." .. tostring(k)
    parts[#parts + 1] = ("[%s] = %s"):format(serialize(k, key_where, seen), serialize(t[k], key_where, seen))
  end
  seen[t] = nil
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function serialize_function(f, where, seen)
  local ups = {}
  for i = 1, math.huge do
    local name, value = debug.getupvalue(f, i)
    if name == nil then break end
    if name == "_ENV" then
      ups[#ups + 1] = ("[%d] = ENV"):format(i)
    elseif value ~= nil then
      ups[#ups + 1] = ("[%d] = %s"):format(i, serialize(value, where .. " (upvalue " .. name .. ")", seen))
    end
  end
  local ok, dump = pcall(string.dump, f)
  if not ok then error(("%s: a C function cannot be copied"):format(where), 0) end
  return ("FN(%q, %q, {%s})"):format(dump, where, table.concat(ups, ", "))
end

function serialize(v, where, seen)
  local kind = type(v)
  if kind == "nil" or kind == "boolean" then return tostring(v) end
  if kind == "number" then
    if math.type(v) == "integer" then return ("%d"):format(v) end
    if v ~= v or v == math.huge or v == -math.huge then return ("(%s)"):format(v ~= v and "0/0" or v > 0 and "1/0" or "-1/0") end
    return ("%.17g"):format(v)
  end
  if kind == "string" then return ("%q"):format(v) end
  if v == cjson.null then return "NULL" end
  local module = module_name_of(v)
  if module then return ("require(%q)"):format(module) end
  if kind == "table" then return serialize_table(v, where, seen) end
  if kind == "function" then return serialize_function(v, where, seen) end
  error(("%s: a %s cannot be copied into the provider process"):format(where, kind), 0)
end

--- Lua source of a chunk that returns a copy of `value`. The chunk needs
-- FN(dump, name, upvalues), ENV and NULL in its environment (see M.load).
function M.to_source(value, where)
  return "return " .. serialize(value, where or "value", {})
end

--- Runs a chunk made by to_source; functions get `env` as their _ENV.
function M.load(source, chunkname, env)
  local function rebuild(dump, name, ups)
    local f = assert(load(dump, "=" .. name, "b"))
    for i, value in pairs(ups) do debug.setupvalue(f, i, value) end
    return f
  end
  local chunk_env = setmetatable({FN = rebuild, ENV = env, NULL = cjson.null}, {__index = _G})
  local chunk = assert(load(source, chunkname, "t", chunk_env))
  return chunk()
end

return M
