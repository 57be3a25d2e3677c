-- Validation of request params for the methods of docs/protocol.md, so a provider
-- written in Lua only sees well-formed params. Also normalizes them: JSON
-- nulls become nil, `close`'s bare session becomes {session = ...}, and every
-- `X_base64` string is decoded into `X` as well.
local cjson = require "cjson"
local core = require "smol.core"

local M = {}

local SESSION = {session = "session"}
local function with_session(fields)
  local t = {session = "session"}
  for k, v in pairs(fields) do t[k] = v end
  return t
end
local COMMAND = with_session{argv = "argv", cwd = "string?", env = "env?", stdin_base64 = "string?",
  timeout_ms = "number?", idle_timeout_ms = "number?", kill_grace_ms = "number?",
  max_output_bytes = "integer?", raw_output = "boolean?"}

-- Field kinds: a trailing "?" means optional. Unknown fields are allowed
-- (the protocol says a provider ignores what it does not know).
M.methods = {
  open = {metadata = "object?", profile = "object?", workspace_sync = "object?", cwd = "string?"},
  close = SESSION,
  shutdown = {},
  describe = {},
  create_dir_all = with_session{path = "string"},
  remove = with_session{path = "string"},
  stat = with_session{path = "string"},
  list_dir = with_session{path = "string"},
  read_file = with_session{path = "string", offset = "integer?", length = "integer?"},
  write_file = with_session{path = "string", content_base64 = "string", append = "boolean?",
    mode = "integer?"},
  create_temp_dir = with_session{prefix = "string?"},
  exec = COMMAND,
  spawn = COMMAND,
  wait = with_session{process_id = "string", timeout_ms = "number?"},
  kill = with_session{process_id = "string", signal = "string?"},
  write_stdin = with_session{process_id = "string", data_base64 = "string?", eof = "boolean?"},
}

local function is_array_of_strings(v, allow_empty)
  if type(v) ~= "table" or (#v == 0 and not allow_empty) then return false end
  for k, item in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > #v or type(item) ~= "string" then return false end
  end
  return true
end

local function is_string_map(v)
  if type(v) ~= "table" then return false end
  for k, item in pairs(v) do
    if type(k) ~= "string" or type(item) ~= "string" then return false end
  end
  return true
end

local CHECKS = {
  string = {function(v) return type(v) == "string" end, "a string"},
  number = {function(v) return type(v) == "number" end, "a number"},
  integer = {function(v) return type(v) == "number" and v % 1 == 0 end, "an integer"},
  boolean = {function(v) return type(v) == "boolean" end, "a boolean"},
  object = {function(v) return type(v) == "table" end, "an object"},
  session = {function(v) return type(v) == "table" and type(v.id) == "string" end,
    "a session object with a string `id`"},
  argv = {function(v) return is_array_of_strings(v) end, "a non-empty array of strings"},
  env = {function(v) return is_string_map(v) end, "an object of strings"},
}

--- A deep copy with JSON nulls removed.
local function without_nulls(v)
  if v == cjson.null then return nil end
  if type(v) ~= "table" then return v end
  local copy = {}
  for k, item in pairs(v) do copy[k] = without_nulls(item) end
  return copy
end

local function check_field(method, params, field, kind)
  local optional = kind:sub(-1) == "?"
  local check = CHECKS[optional and kind:sub(1, -2) or kind]
  local value = params[field]
  if value == nil then
    if optional then return true end
    return false, ("%s: missing field `params.%s`"):format(method, field)
  end
  if not check[1](value) then
    return false, ("%s: field `params.%s` must be %s"):format(method, field, check[2])
  end
  return true
end

local function check_fields(method, params)
  local fields = {}
  for field in pairs(M.methods[method] or {}) do fields[#fields + 1] = field end
  table.sort(fields)   -- the same field is named first every time
  for _, field in ipairs(fields) do
    local ok, message = check_field(method, params, field, M.methods[method][field])
    if not ok then return false, message end
  end
  return true
end

local function decode_base64_fields(method, params)
  for field, value in pairs(params) do
    local stem = type(field) == "string" and field:match("^(.*)_base64$")
    if stem and type(value) == "string" and params[stem] == nil then
      local bytes, err = core.b64decode(value)
      if not bytes then
        return false, ("%s: field `params.%s`: %s"):format(method, field, err)
      end
      params[stem] = bytes
    end
  end
  return true
end

--- Returns the normalized params, or nil, "invalid_request", message.
-- Whether method has a field that must be given (then `params` must be too).
local function needs_fields(method)
  for _, kind in pairs(M.methods[method] or {}) do
    if kind:sub(-1) ~= "?" then return true end
  end
  return false
end

function M.check(method, raw)
  if raw == nil or raw == cjson.null then
    if needs_fields(method) then
      return nil, "invalid_request", ("%s: missing field `params` (an object)"):format(method)
    end
    raw = {}
  end
  if type(raw) ~= "table" then
    return nil, "invalid_request", ("%s: field `params` must be an object"):format(method)
  end
  local params = without_nulls(raw)
  if method == "close" and params.session == nil and params.id ~= nil then
    params = {session = params}   -- the original sends the session itself
  end
  local ok, message = check_fields(method, params)
  if ok then ok, message = decode_base64_fields(method, params) end
  if not ok then return nil, "invalid_request", message end
  return params
end

return M
