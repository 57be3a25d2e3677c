-- Canonical text of decoded JSON requests, for matching a request against a
-- recording and for showing two requests side by side.
local cjson = require "cjson"

local M = {}

local function is_array(t)
  local n = #t
  if n == 0 then return false end
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

--- A scalar as JSON text; numbers as integers where they are integral.
function M.scalar(v)
  if v == nil or v == cjson.null then return "null" end
  if type(v) == "number" then
    local i = math.tointeger(v)
    return i and tostring(i) or ("%.17g"):format(v)
  end
  if type(v) == "string" then return (cjson.encode(v):gsub("\\/", "/")) end
  return tostring(v)
end

--- Walks a decoded JSON value, calling fn(path, text) for every leaf (an
-- empty table is a leaf "{}"), in a stable order, skipping ignored paths.
function M.flatten(v, path, ignore, fn)
  if ignore[path] then return end
  if type(v) ~= "table" then return fn(path, M.scalar(v)) end
  if next(v) == nil then return fn(path, "{}") end
  if is_array(v) then
    for i, item in ipairs(v) do M.flatten(item, ("%s[%d]"):format(path, i), ignore, fn) end
    return
  end
  for _, k in ipairs(sorted_keys(v)) do M.flatten(v[k], path .. "." .. tostring(k), ignore, fn) end
end

-- Fields no two runs agree on: open's metadata holds generated ids.
local ALWAYS_IGNORED = {["params.metadata"] = true}

local function ignored(ignore)
  return setmetatable({}, {__index = function(_, k) return ALWAYS_IGNORED[k] or ignore[k] end})
end

--- The list of {path, text} leaves of a request.
function M.fields(method, params, ignore)
  local out = {{"method", M.scalar(method)}}
  local ig = ignored(ignore or {})
  if params == nil or params == cjson.null then params = {} end
  M.flatten(params, "params", ig, function(path, text) out[#out + 1] = {path, text} end)
  return out
end

--- One string that is equal for equal requests.
function M.request_key(method, params, ignore)
  local parts = {}
  for i, f in ipairs(M.fields(method, params, ignore)) do parts[i] = f[1] .. "=" .. f[2] end
  return table.concat(parts, "\n")
end

local function as_map(fields)
  local map = {}
  for _, f in ipairs(fields) do map[f[1]] = f[2] end
  return map
end

local function common_fields(a, b)
  local n, bmap = 0, as_map(b)
  for _, f in ipairs(a) do
    if bmap[f[1]] == f[2] then n = n + 1 end
  end
  return n
end

--- The unused recorded exchange closest to the request: same method first,
-- then most equal fields, then earliest.
function M.closest(exchanges, method, params, ignore)
  local actual = M.fields(method, params, ignore)
  local best, best_score
  for _, ex in ipairs(exchanges) do
    if not ex.used then
      local score = common_fields(M.fields(ex.method, ex.params, ignore), actual)
        + (ex.method == method and 1e6 or 0)
      if not best or score > best_score then best, best_score = ex, score end
    end
  end
  return best
end

local function clip(text, width)
  if #text <= width then return text .. (" "):rep(width - #text) end
  return text:sub(1, width - 3) .. "..."
end

local function union_of_paths(left, right)
  local paths, seen = {}, {}
  for _, list in ipairs{left, right} do
    for _, f in ipairs(list) do
      if not seen[f[1]] then seen[f[1]], paths[#paths + 1] = true, f[1] end
    end
  end
  table.sort(paths, function(a, b)
    if (a == "method") ~= (b == "method") then return a == "method" end
    return a < b
  end)
  return paths
end

-- The session object is sent back whole with every request: its equal
-- fields are noise in a mismatch report.
local function is_session_field(path)
  return path:sub(1, 15) == "params.session."
end

--- Two requests ({method, params}; `recorded` may be nil) as a table with a
--- row per field, rows that differ marked with "!" and shown whole (a cut
--- value could hide the difference); equal session fields are counted,
--- not shown.
function M.side_by_side(recorded, actual, ignore)
  local left = recorded and M.fields(recorded.method, recorded.params, ignore) or {}
  local right = M.fields(actual.method, actual.params, ignore)
  local lmap, rmap = as_map(left), as_map(right)
  local rows, hidden, pw = {}, 0, 5
  for _, p in ipairs(union_of_paths(left, right)) do
    local l, r = lmap[p] or "(absent)", rmap[p] or "(absent)"
    if l == r and is_session_field(p) then
      hidden = hidden + 1
    else
      rows[#rows + 1] = {p, l, r}
      pw = math.max(pw, math.min(#p, 40))
    end
  end
  local lines = {("    %s  %s  %s"):format(clip("field", pw), clip("recorded", 40), "actual")}
  for _, row in ipairs(rows) do
    local same = row[2] == row[3]
    local recorded_text = (same or #row[2] <= 40) and clip(row[2], 40) or row[2]
    lines[#lines + 1] = ("  %s %s  %s  %s"):format(same and " " or "!", clip(row[1], pw), recorded_text, row[3])
  end
  if hidden > 0 then lines[#lines + 1] = ("    (%d equal fields of params.session not shown)"):format(hidden) end
  return table.concat(lines, "\n")
end

return M
