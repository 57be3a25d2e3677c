-- JSON encoding for the event stream and report.json, on our own cjson
-- instance (so another module's cjson settings cannot change our output).
--
-- Debian's lua-cjson 2.1.0 encodes every empty table as an object "{}", and
-- has no empty_array marker; consumers of report.json expect "[]" for an
-- empty list (needs, attempts, artifacts). array(t) returns a marker table
-- for an empty list; encode() turns the marker's encoding back into "[]".
local cjson = require "cjson"
local text = require "smol.workflow.text"

local M = {}
local json = cjson.new()
json.encode_sparse_array(false)          -- a sparse array is a bug: raise
json.encode_number_precision(14)         -- epoch seconds keep 0.1 ms

local EMPTY_TAG = "\1smolwf.empty-array\1"
local EMPTY = setmetatable({EMPTY_TAG}, {__newindex = function() error("read-only", 2) end})
-- How cjson spells the marker, computed rather than guessed.
local EMPTY_JSON = json.encode(EMPTY)

M.null = cjson.null

--- t, or the empty-array marker when t is nil or empty.
function M.array(t)
  if t == nil or next(t) == nil then return EMPTY end
  return t
end

--- value (or cjson.null when nil): lets a report keep every key present.
function M.opt(value)
  if value == nil then return cjson.null end
  return value
end

local MAX_DEPTH = 16

local function is_array(t)
  local n = #t
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return n > 0
end

--- A JSON-safe copy of user data (params, matrix values): strings, finite
--- numbers and booleans stay; arrays and string-keyed tables are copied;
--- anything else (functions, NaN, cycles, mixed tables' odd keys) becomes its
--- tostring, so one odd value cannot cost the user the whole report.
function M.plain(v, depth)
  if v == nil then return nil end
  depth = depth or 0
  local t = type(v)
  if t == "string" or t == "boolean" then return v end
  if t == "number" then return (v == v and v ~= math.huge and v ~= -math.huge) and v or tostring(v) end
  if t ~= "table" or depth >= MAX_DEPTH or getmetatable(v) ~= nil then return tostring(v) end
  local out = {}
  if is_array(v) then
    for i = 1, #v do out[i] = M.plain(v[i], depth + 1) end
  else
    for k, x in pairs(v) do out[tostring(k)] = M.plain(x, depth + 1) end
  end
  return out
end

local function exact_table(t, depth, seen)
  if getmetatable(t) ~= nil then return nil, "a table with a metatable" end
  if seen[t] then return nil, "a table that contains itself" end
  if depth >= MAX_DEPTH then return nil, "nested deeper than " .. MAX_DEPTH end
  seen[t] = true
  local out, array = {}, next(t) == nil or is_array(t)
  for k, v in pairs(t) do
    if not array and type(k) ~= "string" then
      seen[t] = nil
      return nil, ("a table with a %s key (neither a list nor string keys)"):format(type(k))
    end
    local copy, why = M.exact(v, depth + 1, seen)
    if copy == nil then seen[t] = nil; return nil, why end
    out[k] = copy
  end
  seen[t] = nil
  return next(out) == nil and M.array(nil) or out
end

--- value itself when JSON says exactly the same (strings, finite numbers,
--- booleans, lists, string-keyed tables of those), ready to encode; else
--- nil and what cannot be said (a step's return value in report.json).
function M.exact(v, depth, seen)
  local t = type(v)
  if t == "string" or t == "boolean" then return v end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return nil, "a number JSON has not (" .. tostring(v) .. ")" end
    return v
  end
  if t ~= "table" then return nil, "a " .. t end
  return exact_table(v, depth or 0, seen or {})
end

-- value with every string (keys too) made valid UTF-8: cjson copies bytes
-- as they are, and one stray byte a command wrote (an error message quoting
-- its stderr) would make the whole document invalid JSON for strict readers.
-- Tables are copied only when something in them had to change.
local function valid_strings(value, depth)
  if type(value) == "string" then return text.valid_utf8(value) end
  if type(value) ~= "table" or value == EMPTY or depth > MAX_DEPTH * 2 then return value end
  local copy, changed = {}, false
  for k, v in pairs(value) do
    local ck, cv = valid_strings(k, depth + 1), valid_strings(v, depth + 1)
    changed = changed or ck ~= k or cv ~= v
    copy[ck] = cv
  end
  return changed and copy or value
end

--- The JSON text of value, every string in it valid UTF-8 (invalid bytes
--- become U+FFFD); raises with the reason when it cannot be encoded.
function M.encode(value)
  local encoded = json.encode(valid_strings(value, 0))
  return (encoded:gsub(EMPTY_JSON:gsub("%p", "%%%0"), "[]"))
end

--- An error message for a report: valid UTF-8, without the colour escapes
--- and control characters a command's stderr brings along (newlines and
--- tabs stay); json.null when there is no error.
function M.message(err)
  if err == nil then return cjson.null end
  return text.printable(tostring(err))
end

return M
