-- The host side of a provider written in Lua (`smolwf provider serve FILE.lua`).
--
-- The provider file returns a table of methods, keyed by protocol method
-- name, plus optionally ["*"] for any other method:
--     function methods.exec(params, req) req:event{...}; return {...} end
-- This module does everything else: JSON Lines framing, ids, base64 both
-- ways, one task per request, error replies, and protocol validation
-- (docs/protocol.md). A handler returns its result table, or raises
-- `server.fail(code, message)` (or any table with `code` and `message`, such
-- as a smol.errors value) for an error reply; any other error becomes an
-- `internal` error reply and a traceback on stderr. `shutdown` is always
-- handled here, and `close` answers {} when the file has no `close`.
--
-- Sessions: `params.session` is always the object the file's `open`
-- returned, whether the request sent it whole or only `{"id": S}`, so a
-- provider may announce the `session_by_id` capability without reading
-- anything but the id; `req.raw` keeps the params as they were sent.
--
-- Bytes: every `X_base64` string in the params is also given decoded as `X`
-- (`params.content`, `params.stdin`, `params.data`); in results and events a
-- string in `content`, `stdout`, `stderr` or `data` is sent as `X_base64`.
local cjson = require "cjson"
local task = require "smol.task"
local core = require "smol.core"
local fs = require "smol.fs"
local schema = require "smol.provider.schema"

local M = {}

local json = cjson.new()
json.decode_max_depth(64)
json.encode_max_depth(64)

-- Fields a handler may fill with raw bytes; sent as `<field>_base64`.
local BYTE_FIELDS = {"content", "stdout", "stderr", "data"}

--- Raises an error reply: server.fail("not_found", "no such file `a`").
function M.fail(code, message)
  error({code = code, message = message}, 2)
end

local Server = {}
Server.__index = Server
local Request = {}
Request.__index = Request

--- A server that reads lines through :handle_line(line) / :eof() and writes
-- each reply line (without "\n") through opts.write(line). opts.on_finish()
-- is called once, after `shutdown` was answered or end-of-input was handled.
function M.new(methods, opts)
  if type(methods) ~= "table" then
    error("bad argument #1 to 'server.new' (a table of methods expected, got "
      .. type(methods) .. ")", 2)
  end
  for name, fn in pairs(methods) do
    if type(name) ~= "string" or type(fn) ~= "function" then
      error(("provider method `%s` must be a function, got %s"):format(tostring(name), type(fn)), 2)
    end
  end
  return setmetatable({
    methods = methods, write = opts.write, on_finish = opts.on_finish or function() end,
    log = opts.log or function(msg) io.stderr:write(msg, "\n") end,
    inflight = {}, sessions = {}, closing = false, finished = false,
  }, Server)
end

local function encode_id(id)
  if id == nil then return "null" end
  if type(id) == "string" then return json.encode(id) end
  return ("%.0f"):format(id)   -- integers exactly, whatever their size
end

local function id_key(id)
  return type(id) == "string" and "s" .. id or ("n%.0f"):format(id)
end

local function is_valid_id(id)
  if type(id) == "string" then return true end
  return type(id) == "number" and id == id and id % 1 == 0 and id > -2^63 and id < 2^63
end

function Server:send(id, field, payload)
  self.write(('{"id":%s,"%s":%s}'):format(encode_id(id), field, payload))
end

-- s with each byte that is not part of valid UTF-8 made U+FFFD: lua-cjson
-- writes a string's bytes as they are, and every line must be UTF-8.
local valid_utf8 = core.valid_utf8

-- nil when the JSON text is valid UTF-8, else what is wrong, for a message.
local function not_utf8(payload)
  local _, bad = utf8.len(payload)
  return bad and ("a string that is not valid UTF-8 (byte 0x%02x; bytes that are not text travel "
    .. "as base64, e.g. `name_base64`)"):format(payload:byte(bad)) or nil
end

function Server:reply_error(id, code, message)
  self:send(id, "error", json.encode({code = code, message = valid_utf8(message)}))
end

-- The request's id when a refusal may echo it: the line's problem is not
-- in the id itself (see core.json_problem for kind and key).
local function sound_id(msg, kind, key)
  local id = type(msg) == "table" and msg.id
  if not is_valid_id(id) or kind == "id" or (kind == "duplicate" and key == "id") then return nil end
  if type(id) == "string" and id:find("\0", 1, true) then return nil end
  return id
end

--[[
Refuses a line that does not mean exactly what its text says (a key
twice, an id beyond 2^53, \u0000, text after the request): lua-cjson
would read something else than was written. Each request on the line is
refused by its own id; text after them that is not JSON gets no reply.
]]
function Server:refuse_line(line, problem, kind, key)
  local cut = kind == "trailing" and key or #line
  local ok, msg = pcall(json.decode, line:sub(1, cut))
  self:reply_error(ok and sound_id(msg, kind, key) or nil, "invalid_request", problem)
  if cut >= #line then return end
  local rest = line:sub(cut + 1)
  local _, rest_kind, rest_key = core.json_problem(rest)
  if rest_kind ~= "json" then self:refuse_line(rest, problem, rest_kind, rest_key) end
end

--- Feeds one input line (without "\n").
function Server:handle_line(line)
  if line:find("^%s*$") then return end   -- blank lines are ignored
  local msg, problem, kind, key = core.json_decode(line, 64)
  if kind == "utf8" or kind == "json" then
    return self:reply_error(nil, "invalid_request", "request: " .. problem)
  end
  if kind == "depth" then return self:reply_error(nil, "invalid_request", "request is not valid JSON: " .. problem) end
  if problem then return self:refuse_line(line, "request: " .. problem, kind, key) end
  local req, code, message = self:check_request(msg)
  if not req then
    local id = type(msg) == "table" and is_valid_id(msg.id) and msg.id or nil
    return self:reply_error(id, code, message)
  end
  self:start(req)
end

function Server:check_request(msg)
  if type(msg) ~= "table" then return nil, "invalid_request", "a request must be a JSON object" end
  if not is_valid_id(msg.id) then
    return nil, "invalid_request", "field `id` must be a string or an integer"
  end
  if type(msg.method) ~= "string" then
    return nil, "invalid_request", "field `method` must be a string"
  end
  if self.inflight[id_key(msg.id)] then
    return nil, "invalid_request", ("id %s is already in flight"):format(encode_id(msg.id))
  end
  if self.closing then
    return nil, "unsupported", ("`%s` refused: the provider is shutting down"):format(msg.method)
  end
  return self:check_method(msg)
end

function Server:check_method(msg)
  local method = msg.method
  local handler = self.methods[method] or self.methods["*"]
  if method == "shutdown" then handler = Server.shutdown_handler(self) end
  if method == "close" and not handler then handler = function() return {} end end
  if not handler then return nil, "unknown_method", ("unknown method `%s`"):format(method) end
  local params, code, message = schema.check(method, msg.params)
  if not params then return nil, code, message end
  if params.session then
    local known = self:knows_session(params.session)
    if not known then
      return nil, "unknown_session", ("%s: unknown session `%s`"):format(method, tostring(params.session.id))
    end
    params.session = known
  end
  return setmetatable({id = msg.id, method = method, params = params, raw = msg.params,
    server = self, handler = handler, answered = false}, Request)
end

-- Sessions are learnt from `open` results; a provider whose `open` is
-- handled elsewhere (a forwarder's "*") gets the same check. The session
-- object open returned, or nil.
function Server:knows_session(session)
  return self.sessions[session.id]
end

function Server:start(req)
  self.inflight[id_key(req.id)] = req
  req.task = task.spawn(Server.run, self, req)
end

-- Keeps structured errors as they are; turns anything else into `internal`
-- with the traceback kept for the log.
local function capture(err)
  if type(err) == "table" and type(err.code) == "string" then return err end
  return {code = "internal", message = tostring(err), traceback = debug.traceback(tostring(err), 2)}
end

function Server:run(req)
  local ok, result = xpcall(req.handler, capture, req.params, req)
  if not req.answered then
    if ok then req:reply(result) else req:reply_failure(result) end
  end
  self.inflight[id_key(req.id)] = nil
  if self.drained then self.drained:set() end
end

--- Encodes raw byte fields of a result or an event as `<field>_base64`.
local function encode_bytes(t)
  for _, field in ipairs(BYTE_FIELDS) do
    local value = t[field]
    if type(value) == "string" and t[field .. "_base64"] == nil then
      t[field .. "_base64"] = core.b64encode(value)
      t[field] = nil
    end
  end
  return t
end

local function shallow_copy(t)
  local copy = {}
  for k, v in pairs(t) do copy[k] = v end
  return copy
end

--- Sends an event for this request (before its result).
function Request:event(ev)
  if type(ev) ~= "table" or type(ev.type) ~= "string" then
    error("bad argument #1 to 'event' (a table with a string `type` expected)", 2)
  end
  if self.answered then
    error(("event `%s` after the reply to request %s"):format(ev.type, encode_id(self.id)), 2)
  end
  local ok, payload = pcall(json.encode, encode_bytes(shallow_copy(ev)))
  if not ok then error(("event `%s` cannot be encoded as JSON: %s"):format(ev.type, payload), 2) end
  local bad = not_utf8(payload)
  if bad then error(("event `%s` holds %s"):format(ev.type, bad), 2) end
  self.server:send(self.id, "event", payload)
end

function Request:reply(result)
  if result == nil then result = {} end
  if type(result) ~= "table" then
    return self:reply_failure({code = "internal",
      message = ("method `%s` returned a %s, expected a table"):format(self.method, type(result))})
  end
  local ok, payload = pcall(json.encode, encode_bytes(shallow_copy(result)))
  if not ok then
    return self:reply_failure({code = "internal",
      message = ("method `%s` returned a result that is not JSON: %s"):format(self.method, payload)})
  end
  local bad = not_utf8(payload)
  if bad then
    return self:reply_failure({code = "internal",
      message = ("method `%s` returned %s"):format(self.method, bad)})
  end
  self.answered = true
  self.server:track_sessions(self, result)
  self.server:send(self.id, "result", payload)
end

function Request:reply_failure(err)
  if err.traceback then
    self.server.log(("provider: error in `%s`: %s"):format(self.method, err.traceback))
  end
  local code, message = err.code, tostring(err.message or err.code)
  if code == "cancelled" then code, message = "internal", "cancelled: " .. message end
  self.answered = true
  self.server:reply_error(self.id, code, message)
end

function Server:track_sessions(req, result)
  if req.method == "open" and type(result.id) == "string" then
    self.sessions[result.id] = result
  elseif req.method == "close" then
    self.sessions[req.params.session.id] = nil
  end
end

local function count_others(inflight, except)
  local n = 0
  for _, req in pairs(inflight) do
    if req ~= except then n = n + 1 end
  end
  return n
end

--- Waits until every request in flight has been answered, cancelling those
-- that are still blocked (they answer with a `cancelled` error). A `close`
-- in flight is left to finish: cancelling it would leave a half-closed
-- session behind.
function Server:drain(except)
  for _, req in pairs(self.inflight) do
    if req ~= except and req.task and req.method ~= "close" then
      req.task:cancel("the provider is shutting down")
    end
  end
  while count_others(self.inflight, except) > 0 do
    self.drained = task.event()
    self.drained:wait()
  end
  self.drained = nil
end

function Server:close_sessions()
  local close = self.methods.close or self.methods["*"]
  local ids = {}
  for id in pairs(self.sessions) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    local req = setmetatable({id = false, method = "close", server = self, answered = false,
      params = {session = self.sessions[id]}, raw = self.sessions[id]}, Request)
    if close then
      local ok, err = xpcall(close, capture, req.params, req)
      if not ok then self.log(("provider: closing session `%s` failed: %s"):format(id, err.message)) end
    end
    self.sessions[id] = nil
  end
end

-- `shutdown` (and end of input): answer what is in flight, close every
-- session, call the provider's own `shutdown` if it has one, reply, finish.
function Server.shutdown_handler(self)
  return function(params, req)
    self.closing = true
    self:drain(req)
    self:close_sessions()
    local own = self.methods.shutdown
    local ok, err = true, nil
    if own then ok, err = xpcall(own, capture, params, req) end
    if not ok then self.log("provider: the provider's own shutdown failed: " .. tostring(err.message)) end
    if req.id ~= false then req:reply({}) end   -- whatever happened, the provider goes
    self:finish()
  end
end

--- End of input: behaves as `shutdown` without a reply.
function Server:eof()
  if self.closing then return end
  local req = setmetatable({id = false, method = "shutdown", params = {}, server = self,
    answered = true}, Request)
  self.closing = true
  task.spawn(function()
    local ok, err = xpcall(Server.shutdown_handler(self), capture, req.params, req)
    if not ok then self.log("provider: shutdown at end of input failed: " .. err.message) end
    self:finish()
  end)
end

function Server:finish()
  if self.finished then return end
  self.finished = true
  self.on_finish()
end

--- Waits until every reply line written so far has left the process (used
-- before a deliberate exit, e.g. a fake provider's crash).
function M.flush()
  while core.stdout_pending() > 0 do
    if task.in_task() then task.sleep(0.001) else core.run_once() end
  end
end

--- Serves `methods` on stdin/stdout until `shutdown` or end of input.
function M.serve(methods, opts)
  opts = opts or {}
  local done = task.event()
  local server = M.new(methods, {
    write = function(line) core.write_stdout(line .. "\n") end,
    on_finish = function() done:set() end,
  })
  -- Ctrl-C (or any error) ends the run without `shutdown`: the sessions
  -- still get closed, so a Lua provider leaves nothing behind either.
  task.at_exit(function()
    if server.finished then return end
    server.closing = true
    server:close_sessions()
  end)
  local reader = core.read_stdin{mode = "lines", max_line = opts.max_line or 256 * 1024 * 1024,
    on_data = function(line, err)
      if line then return server:handle_line(line) end
      if err then server:reply_error(nil, "limit_exceeded", "input: " .. tostring(err)) end
      server:eof()
    end}
  done:wait()
  reader:stop()
  M.flush()
  return server
end

--[[ A program for sandbox.open{program = ...} ]]

--- The argv of a provider program that serves FILE.lua with ARGS as `...`:
-- {smolwf, "provider", FILE, ARGS...}. A host starts it with "serve"
-- appended, as every provider (`smolwf provider FILE ARGS... serve`).
function M.program(file, ...)
  if type(file) ~= "string" then
    error("bad argument #1 to 'program' (a Lua provider file expected, got " .. type(file) .. ")", 2)
  end
  local argv = {core.exe_path(), "provider", file}
  for _, a in ipairs({...}) do argv[#argv + 1] = tostring(a) end
  return argv
end

return M
