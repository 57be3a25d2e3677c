--[[
smol.sandbox: sandbox sessions served by provider programs.

  local sb = sandbox.open{program =, profile =, workspace =, cwd =, group =,
                          open_timeout =, max_line_bytes =, max_depth =, on_progress =}
      program: a path or name, or an argv list ({"ssh", "box", "smolwf-provider"}),
      started with "serve" appended
      workspace: "path" or {path =, exclude =, mode =}; none: an empty workspace
  sb:exec{argv..., cwd =, env =, stdin =, timeout =, idle_timeout =,
          capture =, max_output_bytes =, on_stdout =, on_stderr =, on_event =}
  sb:spawn{...} -> process (p:wait(), p:kill(), p:write(), p:close_stdin())
  sb:write_file / read_file / create_dir_all / remove / create_temp_dir
      read_file(path) returns the bytes; read_file(path, {offset =, length =})
      returns the bytes and whether they reach the end of the file
  sb:stat / list_dir            (sessions announcing "fs_extra")
  sb:connection()               the provider connection (pid, program, alive())
  sb:is_closed()
  sb:fork()                     a snapshot of the session as a new one ("fork")
  sb:write_archive / read_archive / archive_writer, sandbox.copy
                                tar archives in and out (sessions announcing
                                "archive"; see smol.archive)
  sb:close()                    (also __close and __gc)
  sandbox.host{cwd = "."}       a session on this machine (smol.host_provider)
  sandbox.pool{...}             several providers, sessions placed on them (smol.pool);
                                open's `connection` option names the provider it uses

One provider process per program serves every session opened with it (the
pool below); one that exited or broke the protocol is replaced at the next
open. Extension fields are sent only where the session announces them.
Provider and protocol failures raise smol.errors values; a process's exit
status is data in the result: {ok, exit_code, signal, timed_out, stdout,
stderr, stdout_truncated, stderr_truncated, argv (the command, a list),
process_id (exec)}. exec's captured output is built from its events where
the session announces "output_limit" (see exec_result.c); `open` has a
deadline (sandbox.open_timeout, see give_up_open). What a session without
an extension does with the options that need it: smol.capabilities.
]]

local cjson = require "cjson"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local jsonl = require "smol.jsonl"
local capabilities = require "smol.capabilities"

local sandbox = {
  max_line_bytes = jsonl.DEFAULT_MAX_LINE,  -- default line cap for new providers
  max_depth = jsonl.DEFAULT_MAX_DEPTH,      -- default JSON nesting cap
  exit_grace = 2,                           -- seconds each exit-time close/shutdown may take
  -- Seconds `open` may take (math.huge: no limit). Where `open` copies the
  -- workspace (no overlay), a big tree (node_modules, build output: many GB
  -- or hundreds of thousands of files) legitimately takes tens of seconds;
  -- 120 s leaves room for that and still ends a provider that never answers.
  open_timeout = 120,
  -- Per-stream cap of exec's captured stdout/stderr when none is given.
  max_output_bytes = 64 * 1024 * 1024,
  -- Seconds past an exec's own timeout that the client waits for its
  -- result before it fails the exec ("timeout") and kills the command:
  -- the provider is not trusted to keep the deadline.
  deadline_grace = 5,
  -- Seconds `close` waits for its answer when the caller gives no timeout.
  close_timeout = 60,
}

local null = cjson.null
local codec = cjson.new()
local tointeger = math.tointeger
local pool = {}                               -- key -> jsonl connection
local open_sessions = setmetatable({}, {__mode = "k"})
local exit_hook_registered = false

local Session = {}
Session.__index = Session
Session.__name = "smol.sandbox.session"

local Process = {}
Process.__index = Process

--[[ Small helpers ]]

local function unique_id(prefix)
  return ("%s_%08x%08x"):format(prefix, math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
end

local function protocol_error(message)
  errors.raise{code = "protocol", message = message}
end

-- Strict base64 decode of a provider field; nil/absent is "".
local function decode_b64(s, what)
  if s == nil or s == null or s == "" then return "" end
  if type(s) ~= "string" then protocol_error(what .. ": not a string") end
  local bytes, err = core.b64decode(s)
  if not bytes then protocol_error(what .. ": " .. tostring(err)) end
  return bytes
end

local function int(v)
  return type(v) == "number" and (math.tointeger(v) or v) or nil
end

local function str(v)
  return type(v) == "string" and v or nil
end

--[[ Providers: the pool and its exit hook ]]

local function default_program()
  local program = os.getenv("SMOLWF_PROVIDER")
  if program and program ~= "" then return program end
  program = core.bundled_provider()
  if program then return program end
  errors.raise{code = "not_found", op = "open", path = "smolwf-provider",
    message = "no provider program: the bundled smolwf-provider is not next to smolwf; "
      .. "name one with sandbox.open{program = ...} or $SMOLWF_PROVIDER"}
end

-- Closes every open session, then shuts every pooled provider down, each
-- step bounded by sandbox.exit_grace; the host kills what is left after.
local function close_everything()
  local sessions = {}
  for sb in pairs(open_sessions) do sessions[#sessions + 1] = sb end
  for _, sb in ipairs(sessions) do
    pcall(sb.close, sb, {timeout = sandbox.exit_grace})
  end
  sandbox.shutdown()
end

local function register_exit_hook()
  if exit_hook_registered or not task.at_exit then return end
  exit_hook_registered = true
  task.at_exit(close_everything)
end

local function connection_for(program, opts)
  local max_line = opts.max_line_bytes or sandbox.max_line_bytes
  local max_depth = opts.max_depth or sandbox.max_depth
  local key = ("%s\0\0%d\0%d"):format(jsonl.program_key(program), max_line, max_depth)
  local conn = pool[key]
  if conn and conn:alive() then return conn end
  conn = jsonl.start(program, {max_line_bytes = max_line, max_depth = max_depth,
                               on_stderr = sandbox.provider_stderr})
  pool[key] = conn
  register_exit_hook()
  return conn
end

-- Shuts down the pooled providers (all, or those running program): each
-- gets `shutdown` and sandbox.exit_grace seconds to exit, then KILL.
-- Sessions still open on them are gone afterwards.
function sandbox.shutdown(program)
  local wanted = program ~= nil and jsonl.program_key(program)
  for key, conn in pairs(pool) do
    if program == nil or jsonl.program_key(conn.program) == wanted then
      pool[key] = nil
      conn:shutdown(sandbox.exit_grace)
    end
  end
end

-- Every pooled connection, live or not yet replaced (for tests and tools).
function sandbox.connections()
  local list = {}
  for _, conn in pairs(pool) do list[#list + 1] = conn end
  return list
end

-- The pooled connection of program, or nil (for tests and tools).
function sandbox.connection(program)
  local wanted = jsonl.program_key(program)
  for _, conn in pairs(pool) do
    if jsonl.program_key(conn.program) == wanted and conn:alive() then return conn end
  end
end

--[[ Opening ]]

local function check_profile(profile)
  if profile == nil then return {provider = "auto", name = "default"} end
  if type(profile) == "table" then
    if type(profile.provider) ~= "string" or type(profile.name) ~= "string" then
      error("sandbox.open: profile table needs string fields provider and name", 3)
    end
    return {provider = profile.provider, name = profile.name}
  end
  local provider, name = tostring(profile):match("^([^/]+)/(.+)$")
  if not provider then
    error(("sandbox.open: profile must be \"PROVIDER/NAME\", got %q"):format(tostring(profile)), 3)
  end
  return {provider = provider, name = name}
end

-- workspace = "path" or {path =, exclude = {patterns...}, mode = "copy"|"bind"|"ro"}.
local function check_workspace(ws)
  if ws == nil or type(ws) == "string" then return end
  if type(ws) ~= "table" then error("sandbox.open: option workspace must be a path or a table", 4) end
  for k in pairs(ws) do
    if k ~= "path" and k ~= "exclude" and k ~= "mode" then
      error(("sandbox.open: workspace: unknown field `%s` (known: path, exclude, mode)"):format(tostring(k)), 4)
    end
  end
  if type(ws.path) ~= "string" then error("sandbox.open: workspace.path must be a string", 4) end
  if ws.mode ~= nil and ws.mode ~= "copy" and ws.mode ~= "bind" and ws.mode ~= "ro" then
    error(("sandbox.open: workspace.mode must be \"copy\", \"bind\" or \"ro\", got %s"):format(tostring(ws.mode)), 4)
  end
  if ws.exclude ~= nil and type(ws.exclude) ~= "table" then
    error("sandbox.open: workspace.exclude must be a list of patterns", 4)
  end
  for i, pattern in ipairs(ws.exclude or {}) do
    if type(pattern) ~= "string" then error(("sandbox.open: workspace.exclude[%d] must be a string"):format(i), 4) end
  end
end

-- open's workspace_sync: no workspace (an empty one) unless the caller names a tree.
local function workspace_sync(ws)
  if ws == nil then return {host_path = null} end
  if type(ws) == "string" then return {host_path = ws} end
  local sync = {host_path = ws.path, mode = ws.mode}
  if ws.exclude and #ws.exclude > 0 then sync.exclude = ws.exclude end
  return sync
end

-- on_progress(ev) sees open's `progress` events (files and bytes copied so far).
local function progress_events(opts)
  if opts.on_progress == nil then return nil end
  if type(opts.on_progress) ~= "function" then error("sandbox: option on_progress must be a function", 3) end
  return function(ev)
    if type(ev) == "table" and ev.type == "progress" then opts.on_progress(ev) end
  end
end

-- open's options; `connection` is smol.pool's (a provider it started).
local OPEN_OPTIONS = {"program", "profile", "workspace", "cwd", "group", "open_timeout",
  "max_line_bytes", "max_depth", "on_progress", "connection"}
local is_open_option = {}
for _, k in ipairs(OPEN_OPTIONS) do is_open_option[k] = true end

local function check_open_opts(opts)
  if type(opts) ~= "table" then error("sandbox.open: expected a table of options", 3) end
  -- a misspelled option would silently give a default (`worksapce`: an empty workspace)
  for k in pairs(opts) do
    if not is_open_option[k] then
      error(("sandbox.open: unknown option `%s` (known: %s)"):format(tostring(k),
        table.concat(OPEN_OPTIONS, ", ", 1, #OPEN_OPTIONS - 1)), 3)
    end
  end
  if opts.program ~= nil then jsonl.argv(opts.program, 4) end
  check_workspace(opts.workspace)
  for _, k in ipairs{"cwd", "group"} do
    if opts[k] ~= nil and type(opts[k]) ~= "string" then
      error(("sandbox.open: option %s must be a string"):format(k), 3)
    end
  end
  for _, k in ipairs{"max_line_bytes", "max_depth"} do
    if opts[k] ~= nil and (math.type(opts[k]) ~= "integer" or opts[k] < 1) then
      error(("sandbox.open: option %s must be a positive integer"):format(k), 3)
    end
  end
  local t = opts.open_timeout
  if t ~= nil and (type(t) ~= "number" or not (t > 0)) then
    error("sandbox.open: option open_timeout must be a positive number of seconds", 3)
  end
end

-- How exec's params end: with max_output_bytes 0 where the session
-- announces "output_limit" (no copy in the result: see capture "events"),
-- and raw_output where it announces that (output as frames of raw bytes,
-- not base64: docs/protocol.md).
local function exec_tail(caps)
  return (caps.output_limit and ',"max_output_bytes":0' or "") .. (caps.raw_output == true and ',"raw_output":true' or "") .. "}"
end

-- What requests send as their `session`: the whole object open returned,
-- or only its id where the session announces "session_by_id" (a provider
-- then parses ~20 bytes per request instead of the whole object).
local function session_ref(session, caps)
  return codec.encode(caps.session_by_id == true and {id = session.id} or session)
end

local function new_session(conn, session, program)
  if type(session) ~= "table" or type(session.id) ~= "string" then
    errors.raise{code = "protocol", op = "open", path = program,
      message = "open result is not a session object with a string id"}
  end
  local caps = type(session.capabilities) == "table" and session.capabilities or {}
  local sb = setmetatable({
    id = session.id, cwd = str(session.cwd), capabilities = caps, program = program,
    program_label = conn.label,
    session = session, _conn = conn, _session_json = session_ref(session, caps), _closed = false,
    _exec_tail = exec_tail(caps),
    workspace = type(session.workspace) == "table" and session.workspace or nil,
  }, Session)
  open_sessions[sb] = true
  return sb
end

-- True when some open session, or a request other than ours, uses conn.
local function in_use(conn)
  if conn:in_use() then return true end
  for sb in pairs(open_sessions) do
    if sb._conn == conn then return true end
  end
  return false
end

--[[
`open` missed its deadline. A provider nobody else uses is given up: TERM,
then KILL, and open returns only once it has exited, so nothing is left
running. A provider that serves other sessions keeps serving them (it may
be slow, not stuck: e.g. copying another big workspace); should it answer
this `open` later, the session it made is closed at once (on_late).
]]
local function give_up_open(conn, err)
  if in_use(conn) then return end
  for key, c in pairs(pool) do
    if c == conn then pool[key] = nil end
  end
  conn:give_up(err, ("did not answer `open` within %g s"):format(err.seconds or 0))
  conn:wait_exit()
end

local function close_late_session(conn)
  return function(msg)
    if type(msg.result) == "table" and conn:alive() then
      conn:notify("close", codec.encode(msg.result))
    end
  end
end

function sandbox.open(opts)
  opts = opts or {}
  check_open_opts(opts)
  local profile = check_profile(opts.profile)
  -- opts.connection: a provider connection its caller started (smol.pool), used as it is
  local conn = opts.connection
  local program = conn and conn.program or opts.program or default_program()
  if conn then register_exit_hook() else conn = connection_for(program, opts) end
  local params = {
    metadata = {request_id = unique_id("req"), sandbox_group_id = opts.group or unique_id("sbxgrp")},
    profile = profile,
    workspace_sync = workspace_sync(opts.workspace),
    cwd = opts.cwd or null,
    progress = opts.on_progress ~= nil or nil,
  }
  local ok, session = pcall(conn.request, conn, "open", params, progress_events(opts),
    {timeout = opts.open_timeout or sandbox.open_timeout, on_late = close_late_session(conn)})
  if not ok then
    if errors.is(session, "timeout") then give_up_open(conn, session) end
    error(errors.with_context(session, "open", program, conn.label), 0)
  end
  return new_session(conn, session, program)
end

-- sandbox.pool{...}: several providers, each session placed on the least-loaded (smol.pool).
function sandbox.pool(opts)
  local p = require("smol.pool").new(opts, 1)
  return p
end

--[[
sandbox.host{cwd = "."}: a session on this machine, with no isolation,
served by smol.host_provider (see there for what "the host" means) like
any other provider: the same checks, results and errors as a sandbox.
The provider is started once, as `smolwf provider FILE serve`, and pooled.
]]
local host_program

function sandbox.host(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("sandbox.host: expected a table of options", 2) end
  for k in pairs(opts) do
    if k ~= "cwd" then error(("sandbox.host: unknown option `%s` (known: cwd)"):format(tostring(k)), 2) end
  end
  local cwd = opts.cwd or "."
  if type(cwd) ~= "string" then error("sandbox.host: cwd must be a string", 2) end
  if not host_program then
    local file = package.searchpath("smol.host_provider", package.path)
    if not file then error("sandbox.host: cannot find the module smol.host_provider", 2) end
    if file:sub(1, 1) ~= "/" then file = require("lfs").currentdir() .. "/" .. file end
    host_program = {core.exe_path(), "provider", file}
  end
  return sandbox.open{program = host_program, profile = "host/default", workspace = cwd}
end

--[[ Session plumbing ]]

local function check_open(self, op)
  -- _closed is false exactly on open sessions: one field read on the hot
  -- path, and the metatable is looked at only when something is wrong
  if self ~= nil and self._closed == false then return end
  if getmetatable(self) ~= Session then
    error(("sandbox: %s: expected a session (did you use '.' instead of ':'?)"):format(op), 3)
  end
  error(("sandbox: %s: attempt to use a closed session"):format(op), 3)
end

-- Params as JSON text: {"session": <the session, encoded once>, fields...}.
-- raw is {key, base64}: spliced in as is (base64 needs no escaping and can
-- be large: no second copy through the encoder).
local EMPTY = setmetatable({}, {__newindex = function() error("EMPTY is read-only", 2) end})

function Session:params_json(fields, raw)
  local rest = codec.encode(fields or EMPTY)
  rest = rest ~= "{}" and "," .. rest:sub(2) or "}"
  if raw then
    return table.concat{'{"session":', self._session_json, ',"', raw[1], '":"', raw[2], '"', rest}
  end
  return '{"session":' .. self._session_json .. rest
end

-- The result of method, which must be a JSON object (a table).
local function check_object(result, method, op, path)
  if type(result) ~= "table" then
    errors.raise{code = "protocol", op = op, path = path,
      message = ("the result of `%s` is not a JSON object"):format(method)}
  end
  return result
end

-- One request on behalf of op; errors get the op and path as context.
function Session:call(method, fields, opts)
  opts = opts or EMPTY
  local op = opts.op or method
  local ok, result = self._conn:try_request(method, self:params_json(fields, opts.raw), opts.on_event)
  if not ok then error(errors.with_context(result, op, opts.path), 0) end
  return check_object(result, method, op, opts.path)
end

function Session:require_capability(cap, op, path)
  capabilities.require(self, cap, op, path)
end

-- True once the session is closed (by close, __close, __gc or its provider's end).
function Session:is_closed()
  if getmetatable(self) ~= Session then error("sandbox: is_closed: expected a session", 2) end
  return self._closed == true
end

-- The provider connection serving this session (smol.jsonl: pid, program,
-- alive(), kill(signal)); for tests and tools.
function Session:connection()
  check_open(self, "connection")
  return self._conn
end

--[[ File operations ]]

local function check_path(path, op)
  if type(path) ~= "string" then
    error(("sandbox: %s: path must be a string, got %s"):format(op, type(path)), 3)
  end
end

-- An options argument: nil or a table; misuse raises at the method's caller.
local function check_opts(opts, n, op)
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #%d to '%s' (table of options expected, got %s)"):format(n, op, type(opts)), 3)
  end
end

function Session:write_file(path, data, opts)
  check_open(self, "write_file") check_path(path, "write_file")
  if type(data) ~= "string" then error("sandbox: write_file: data must be a string", 2) end
  check_opts(opts, 3, "write_file")
  local fields = {path = path}
  if opts and (opts.append ~= nil or opts.mode ~= nil) then
    self:require_capability("fs_extra", "write_file", path)
    fields.append, fields.mode = opts.append, opts.mode
  end
  self:call("write_file", fields, {path = path, raw = {"content_base64", core.b64encode(data)}})
end

-- Returns the bytes (one value, as Lua's readers do); with opts.offset or
-- opts.length (fs_extra), also whether they reach the end of the file.
function Session:read_file(path, opts)
  check_open(self, "read_file") check_path(path, "read_file")
  check_opts(opts, 2, "read_file")
  local fields = {path = path}
  local ranged = opts ~= nil and (opts.offset ~= nil or opts.length ~= nil)
  if ranged then
    self:require_capability("fs_extra", "read_file", path)
    fields.offset, fields.length = opts.offset, opts.length
  end
  local r = self:call("read_file", fields, {path = path})
  local ok, bytes = pcall(decode_b64, r.content_base64, "read_file returned invalid base64 content")
  if not ok then error(errors.with_context(bytes, "read_file", path), 0) end
  if ranged then return bytes, r.eof == true end
  return bytes
end

function Session:create_dir_all(path)
  check_open(self, "create_dir_all") check_path(path, "create_dir_all")
  self:call("create_dir_all", {path = path}, {path = path})
end

function Session:remove(path)
  check_open(self, "remove") check_path(path, "remove")
  self:call("remove", {path = path}, {path = path})
end

function Session:create_temp_dir(prefix)
  check_open(self, "create_temp_dir")
  local r = self:call("create_temp_dir", {prefix = prefix or "tmp-"})
  if type(r.path) ~= "string" then
    errors.raise{code = "protocol", op = "create_temp_dir", message = "create_temp_dir result has no string path"}
  end
  return r.path
end

function Session:stat(path)
  check_open(self, "stat") check_path(path, "stat")
  self:require_capability("fs_extra", "stat", path)
  local r = self:call("stat", {path = path}, {path = path})
  return {type = str(r.type), size = int(r.size), mode = int(r.mode), mtime = r.mtime}
end

function Session:list_dir(path)
  check_open(self, "list_dir") check_path(path, "list_dir")
  self:require_capability("fs_extra", "list_dir", path)
  local r = self:call("list_dir", {path = path}, {path = path})
  local entries = {}
  for i, e in ipairs(type(r.entries) == "table" and r.entries or {}) do
    entries[i] = {name = str(e.name), type = str(e.type), size = int(e.size)}
  end
  return entries
end

--[[ Processes: events and results ]]

local KNOWN_EVENTS = {started = true, stdout = true, stderr = true, exited = true, dropped = true}

--[[
A process request's state, `req`, made only for a request with callbacks
or a client deadline (a quiet request has none: its events stay in the
connection):
  spec        the caller's callbacks (on_stdout, on_stderr, on_event)
  process_id  from the `started` event (to kill the process on a client
              deadline); false until then
The result itself is made by the connection (host/smolwf/exec_result.c),
which also keeps the output: with capture "events", for sessions
announcing "output_limit", the provider is asked for no copy of its own
(max_output_bytes = 0), so a big output is not held again as one huge
result line, and crosses the pipe once; each stream keeps its first
max_output_bytes, truncated exactly when the command wrote more. "copy"
takes the result's own copy (part-1 providers, wait).
]]

-- A process request's on_event: validates each event, decodes its data,
-- and hands it to the caller's callbacks in order. req is nil for a quiet
-- request (only an event the connection did not take reaches here).
local function on_process_event(ev, req)
  if type(ev) ~= "table" then protocol_error("sandbox exec event is not a JSON object") end
  local kind = ev.type
  if not KNOWN_EVENTS[kind] then
    protocol_error(("unknown sandbox exec event type `%s`"):format(tostring(kind)))
  end
  if kind == "stdout" or kind == "stderr" then
    -- the connection decodes valid payloads (see host/smolwf/conn.h)
    if type(ev.data) ~= "string" then
      ev.data = decode_b64(ev.data_base64, "sandbox exec event contained invalid base64 data")
    end
  elseif kind == "started" and req then
    req.process_id = str(ev.process_id)
    if req.timed_out then req.session:kill_timed_out(req) end
  end
  if req == nil then return end
  local spec = req.spec
  if spec.on_event then spec.on_event(ev) end
  local on_data = kind == "stdout" and spec.on_stdout or kind == "stderr" and spec.on_stderr
  if on_data then on_data(ev.data) end
end

local function milliseconds(seconds)
  return math.floor(seconds * 1000 + 0.5)  -- an integer: concatenates without ".0"
end

--[[
A deadline the session cannot keep itself (no "timeout" capability, see
smol.capabilities): when it passes, the command is killed through the
session, as soon as its `started` event named it.
]]
function Session:kill_timed_out(req)
  if req.killed or not req.process_id or not self._conn:alive() then return end
  req.killed = true
  pcall(self._conn.notify, self._conn, "kill",
    self:params_json({process_id = req.process_id, signal = "KILL"}))
end

local function arm_client_timeout(self, req, seconds)
  req.session = self
  return core.timer(seconds, function()
    req.timed_out = "wall"
    self:kill_timed_out(req)
  end)
end

-- After a failed process request: a cancelled waiter, or one whose
-- deadline passed without an answer, kills what it started.
function Session:kill_on_cancel(err, pid)
  local code = type(err) == "table" and err.code
  if (code == "cancelled" or code == "timeout") and pid and self.capabilities.process and self._conn:alive() then
    pcall(self._conn.notify, self._conn, "kill",
      self:params_json({process_id = pid, signal = "KILL"}))
  end
end

local function has_callbacks(spec)
  return spec.on_stdout or spec.on_stderr or spec.on_event
end

--[[
Sends a process request (params: JSON text) and returns its result (see
exec_result.c). req: the request's state, or nil for a quiet request;
seconds: a deadline the client enforces (see kill_timed_out), or nil.
]]
local function process_request(self, method, params, req, op, path, seconds, capture, limit, argv, deadline)
  local timer = seconds and arm_client_timeout(self, req, seconds)
  local ok, r, pid = self._conn:try_process(method, params, on_process_event, req, capture, limit, argv,
    req == nil, deadline)
  if timer then timer:stop() end
  if not ok then
    self:kill_on_cancel(r, pid)
    error(errors.with_context(r, op, path), 0)
  end
  local timed_out = req and req.timed_out
  if timed_out and not r.timed_out then r.timed_out, r.ok = timed_out, false end
  return r
end

--[[
exec and spawn: core.process_params checks the spec and builds the params
in C (every command's hot path, see host/smolwf/command.c); it is called
from the method itself so that a bad spec is reported at the method's
caller. Extensions go out only where announced (smol.capabilities).
]]
function Session:exec(spec)
  if self == nil or self._closed ~= false then check_open(self, "exec") end
  local caps = self.capabilities
  local argv, params = core.process_params(spec, "exec", self._session_json, caps.timeout, self._exec_tail)
  local seconds = (spec.timeout or spec.idle_timeout) and capabilities.client_deadline(self, spec, "exec", argv[1])
  local capture = spec.capture == false and "none" or caps.output_limit and "events" or "copy"
  local req = (seconds or spec.on_stdout or spec.on_stderr or spec.on_event) and {spec = spec, process_id = false} or nil
  local timeout = spec.timeout
  return process_request(self, "exec", params, req, "exec", argv[1], seconds, capture,
    tointeger(spec.max_output_bytes or sandbox.max_output_bytes) or math.maxinteger, argv,
    timeout and timeout + sandbox.deadline_grace)
end

function Session:spawn(spec)
  check_open(self, "spawn")
  local argv, params = core.process_params(spec, "spawn", self._session_json, self.capabilities.timeout, "}")
  if spec.timeout or spec.idle_timeout then capabilities.client_deadline(self, spec, "spawn", argv[1]) end
  local req = {spec = spec, process_id = false}
  local ok, r = self._conn:try_request("spawn", params, on_process_event, req)
  if not ok then
    self:kill_on_cancel(r, req.process_id or nil)
    error(errors.with_context(r, "spawn", argv[1]), 0)
  end
  if type(r) ~= "table" or type(r.process_id) ~= "string" then
    errors.raise{code = "protocol", op = "spawn", path = argv[1], message = "spawn result has no string process_id"}
  end
  return setmetatable({process_id = r.process_id, argv = argv, session = self,
    _callbacks = {on_stdout = spec.on_stdout, on_stderr = spec.on_stderr, on_event = spec.on_event}}, Process)
end

--[[ Spawned processes (sessions announcing "process") ]]

function Process:request(method, fields, opts)
  local sb = self.session
  check_open(sb, method)
  sb:require_capability("process", method, self.process_id)
  fields.process_id = self.process_id
  opts = opts or {}
  opts.op, opts.path = method, self.process_id
  return sb:call(method, fields, opts)
end

-- Waits for the process (opts.timeout: seconds, then {running = true});
-- streams output not yet delivered to the spawn's callbacks (or opts').
function Process:wait(opts)
  opts = opts or {}
  local sb = self.session
  check_open(sb, "wait")
  sb:require_capability("process", "wait", self.process_id)
  local spec = {on_stdout = opts.on_stdout or self._callbacks.on_stdout,
    on_stderr = opts.on_stderr or self._callbacks.on_stderr,
    on_event = opts.on_event or self._callbacks.on_event}
  local req = has_callbacks(spec) and {spec = spec, process_id = false} or nil
  local params = sb:params_json({process_id = self.process_id,
    timeout_ms = opts.timeout and milliseconds(opts.timeout) or nil})
  return process_request(sb, "wait", params, req, "wait", self.process_id, nil,
    opts.capture == false and "none" or "copy", sandbox.max_output_bytes, table.move(self.argv, 1, #self.argv, 1, {}),
    opts.timeout and opts.timeout + sandbox.deadline_grace)
end

function Process:kill(signal)
  self:request("kill", {signal = signal or "TERM"})
end

function Process:write(data)
  if type(data) ~= "string" then error("sandbox: process:write: data must be a string", 2) end
  self:request("write_stdin", {}, {raw = {"data_base64", core.b64encode(data)}})
end

function Process:close_stdin()
  self:request("write_stdin", {eof = true})
end

--[[ Forking ]]

--- A new session whose workspace and /tmp start as a copy-on-write
-- snapshot of this one's as they are now (sessions announcing "fork").
-- Writes in either are never seen by the other. opts.on_progress as for open.
function Session:fork(opts)
  check_open(self, "fork")
  opts = opts or EMPTY
  self:require_capability("fork", "fork")
  local fields = opts.on_progress and {progress = true} or nil
  local session = self:call("fork", fields, {on_event = progress_events(opts)})
  return new_session(self._conn, session, self.program)
end

--[[ Closing ]]

-- Closes the session (idempotent). A session whose provider is gone is
-- simply marked closed. opts.timeout (default sandbox.close_timeout) bounds
-- the wait for the reply.
function Session:close(opts)
  if getmetatable(self) ~= Session then error("sandbox: close: expected a session", 2) end
  if self._closed then return end
  self._closed = true
  open_sessions[self] = nil
  local conn = self._conn
  if not conn:alive() then return end
  local ok, err = pcall(conn.request, conn, "close", self._session_json, nil,
    {timeout = opts and opts.timeout or sandbox.close_timeout})
  if not ok then error(errors.with_context(err, "close"), 0) end
end

Session.__close = function(self) self:close() end

-- Backstop only: a forgotten session is closed without waiting for the reply.
Session.__gc = function(self)
  if self._closed or not self._conn:alive() then return end
  self._closed = true
  pcall(self._conn.notify, self._conn, "close", self._session_json)
end

function Session:__tostring()
  return ("sandbox session %s (%s)%s"):format(self.id, self.program, self._closed and " closed" or "")
end

require("smol.archive").install(Session, sandbox, check_open)

sandbox.Session, sandbox.Process = Session, Process
return sandbox
