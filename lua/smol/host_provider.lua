--[[
The provider behind `sandbox.host{cwd = "."}`: the protocol's methods
(docs/protocol.md, with the process, timeout, signal, output_limit,
fs_extra and session_by_id extensions) run directly on this machine, with
no isolation.
smol.sandbox serves it like any other provider, as
`smolwf provider lua/smol/host_provider.lua serve`, so a host session has
the same argument checks, results and errors as every sandbox session.

What makes it "the host": a session's workspace is the directory given
(used in place, never copied) and its cwd; relative paths resolve against
it and any path is allowed; commands get this machine's environment plus
the request's `env`, and run as process-group leaders, so kill and
timeouts reach their children too. Temp dirs it made (create_temp_dir, in
$TMPDIR) are removed at close, as a provider's temp area is. A spawned
process's output is buffered
(at most SPAWN_BUFFER_BYTES per stream, oldest dropped first, reported by
a `dropped` event) until `wait` delivers it.
]]

local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local server = require "smol.provider.server"
local lfs = require "lfs"
local null = require("cjson").null

local SPAWN_BUFFER_BYTES = 1024 * 1024
local KILL_GRACE = 2    -- seconds between TERM and KILL on a timeout

local sessions = {}     -- id -> {id, cwd, processes = {process_id -> process}}
local nsessions, nprocesses = 0, 0

--[[ Sessions and paths ]]

local function session_of(params)
  local s = sessions[params.session and params.session.id]
  if not s then server.fail("unknown_session", "no open session `" .. tostring(params.session and params.session.id) .. "`") end
  return s
end

local function resolve(s, path)
  if path:sub(1, 1) == "/" then return path end
  if path == "." or path == "" then return s.cwd end
  return s.cwd .. "/" .. path
end

local function fail(op, path, msg, errno)
  errors.raise{code = core.error_code(errno), op = op, path = path, message = tostring(msg)}
end

local function absolute(dir)
  if dir:sub(1, 1) == "/" then return dir end
  return lfs.currentdir() .. (dir == "." and "" or "/" .. dir)
end

local CAPABILITIES = {exec = true, process = true, timeout = true, signal = true,
  output_limit = true, fs_extra = true, session_by_id = true, isolation = "none"}

local methods = {}
local remove_tree   -- (below, with the file operations)

function methods.open(params)
  local dir = params.workspace_sync.host_path
  local cwd = absolute(params.cwd ~= nil and params.cwd ~= null and params.cwd or dir)
  if params.cwd and params.cwd ~= null and params.cwd:sub(1, 1) ~= "/" then
    cwd = absolute(dir) .. "/" .. params.cwd
  end
  if lfs.attributes(cwd, "mode") ~= "directory" then
    server.fail("not_found", "cwd is not a directory: " .. cwd)
  end
  nsessions = nsessions + 1
  local id = "host_" .. nsessions
  sessions[id] = {id = id, cwd = cwd, processes = {}, temp_dirs = {}}
  return {id = id, cwd = cwd, capabilities = CAPABILITIES}
end

-- Like every provider's close: the processes the session started and nobody
-- waited for are killed (their whole group).
function methods.close(params)
  local id = params.session and params.session.id or params.id
  local s = sessions[id]
  if not s then server.fail("unknown_session", "close: no open session `" .. tostring(id) .. "`") end
  sessions[id] = nil
  for _, p in pairs(s.processes) do
    if not p.done and p.proc then
      p.proc:kill("KILL")
      p.proc:close()
    end
  end
  for _, dir in ipairs(s.temp_dirs) do pcall(remove_tree, dir, dir) end
  return {}
end

--[[ File operations ]]

function methods.write_file(params)
  local s = session_of(params)
  local path, full = params.path, resolve(s, params.path)
  local f, msg, errno = io.open(full, params.append and "ab" or "wb")
  if not f then fail("write_file", path, msg, errno) end
  local ok, wmsg, werrno = f:write(params.content or "")
  f:close()
  if not ok then fail("write_file", path, wmsg, werrno) end
  if params.mode then
    local done, cmsg, cerr = core.chmod(full, params.mode)
    if not done then errors.raise{code = core.error_code(cerr), op = "write_file", path = path, message = cmsg} end
  end
  return {}
end

function methods.read_file(params)
  local s = session_of(params)
  local path = params.path
  local f, msg, errno = io.open(resolve(s, path), "rb")
  if not f then fail("read_file", path, msg, errno) end
  if params.offset then f:seek("set", params.offset) end
  local data, rmsg, rerrno = f:read(params.length or "a")
  local eof = f:read(0) == nil
  f:close()
  if data == nil and rmsg then fail("read_file", path, rmsg, rerrno) end
  return {content = data or "", eof = eof}
end

function methods.create_dir_all(params)
  local s = session_of(params)
  local full = resolve(s, params.path)
  local prefix = full:sub(1, 1) == "/" and "" or "."
  for part in full:gmatch("[^/]+") do
    prefix = prefix .. "/" .. part
    local mode = lfs.attributes(prefix, "mode")
    if mode == nil then
      local ok, msg, errno = lfs.mkdir(prefix)
      if not ok and lfs.attributes(prefix, "mode") ~= "directory" then fail("create_dir_all", params.path, msg, errno) end
    elseif mode ~= "directory" then
      fail("create_dir_all", params.path, prefix .. ": not a directory", 20)
    end
  end
  return {}
end

function remove_tree(full, path)
  if lfs.symlinkattributes(full, "mode") == "directory" then
    for name in lfs.dir(full) do
      if name ~= "." and name ~= ".." then remove_tree(full .. "/" .. name, path) end
    end
  end
  local ok, msg, errno = os.remove(full)
  if not ok then fail("remove", path, msg, errno) end
end

function methods.remove(params)
  local s = session_of(params)
  local full = resolve(s, params.path)
  if not lfs.symlinkattributes(full) then fail("remove", params.path, full .. ": no such file or directory", 2) end
  remove_tree(full, params.path)
  return {}
end

function methods.create_temp_dir(params)
  local s = session_of(params)
  local base = os.getenv("TMPDIR") or "/tmp"
  local dir, err, errname = core.mkdtemp(base .. "/" .. (params.prefix or "tmp-") .. "XXXXXX")
  if not dir then errors.raise{code = core.error_code(errname), op = "create_temp_dir", message = err} end
  s.temp_dirs[#s.temp_dirs + 1] = dir   -- removed at close, as a provider's temp area is
  return {path = dir}
end

local MODE_TYPE = {file = "file", directory = "dir", link = "symlink"}

function methods.stat(params)
  local s = session_of(params)
  local a, msg, errno = lfs.symlinkattributes(resolve(s, params.path))
  if not a then fail("stat", params.path, msg, errno) end
  return {type = MODE_TYPE[a.mode] or "other", size = a.size,
          mode = tonumber(a.permissions:gsub("[^-]", "1"):gsub("-", "0"), 2), mtime = a.modification}
end

function methods.list_dir(params)
  local s = session_of(params)
  local full = resolve(s, params.path)
  if lfs.attributes(full, "mode") ~= "directory" then
    fail("list_dir", params.path, full .. ": not a directory", lfs.attributes(full) and 20 or 2)
  end
  local entries = {}
  for name in lfs.dir(full) do
    if name ~= "." and name ~= ".." then
      local a = lfs.symlinkattributes(full .. "/" .. name) or {}
      entries[#entries + 1] = {name = name, type = MODE_TYPE[a.mode] or "other", size = a.size}
    end
  end
  table.sort(entries, function(x, y) return x.name < y.name end)
  return {entries = entries}
end

--[[ Processes: one inbox of output and exit per process ]]

-- This machine's environment as a map, plus the request's additions.
local function merged_env(extra)
  if not extra or extra == null then return nil end
  local env = {}
  local f = io.open("/proc/self/environ", "rb")
  if f then
    for k, v in f:read("a"):gmatch("([^=%z]+)=([^%z]*)%z") do env[k] = v end
    f:close()
  end
  for k, v in pairs(extra) do env[k] = tostring(v) end
  return env
end

local function new_inbox(cap)
  return {items = {}, bytes = {stdout = 0, stderr = 0}, dropped = {stdout = 0, stderr = 0}, cap = cap}
end

local function inbox_push(box, item)
  box.items[#box.items + 1] = item
  local stream = item.type
  if box.cap and box.bytes[stream] then
    box.bytes[stream] = box.bytes[stream] + #item.data
    while box.bytes[stream] > box.cap do
      for i, old in ipairs(box.items) do
        if old.type == stream then
          table.remove(box.items, i)
          box.bytes[stream] = box.bytes[stream] - #old.data
          box.dropped[stream] = box.dropped[stream] + #old.data
          break
        end
      end
    end
  end
  if box.waiter then box.waiter:set() end
end

-- Takes what is buffered, waiting for something first (nil on timeout).
local function inbox_take(box, deadline)
  while #box.items == 0 do
    box.waiter = task.event()
    local timer = deadline and core.timer(math.max(0, deadline - core.now()), function() box.waiter:set() end)
    box.waiter:wait()
    if timer then timer:stop() end
    box.waiter = nil
    if deadline and core.now() >= deadline and #box.items == 0 then return nil end
  end
  local items = {}
  for _, stream in ipairs{"stdout", "stderr"} do
    if box.dropped[stream] > 0 then
      items[#items + 1] = {type = "dropped", stream = stream, bytes = box.dropped[stream]}
      box.dropped[stream] = 0
    end
  end
  table.move(box.items, 1, #box.items, #items + 1, items)
  box.items = {}
  box.bytes.stdout, box.bytes.stderr = 0, 0
  return items
end

-- Starts argv; nil and the message when it cannot start.
local function start_process(s, params, box, keep_stdin)
  local argv = params.argv
  local cwd = params.cwd ~= nil and params.cwd ~= null and resolve(s, params.cwd) or s.cwd
  local proc, msg = core.spawn{
    file = argv[1], args = argv, cwd = cwd, env = merged_env(params.env),
    stdin = true, stdout = "chunks", stderr = "chunks", process_group = true,
    on_stdout = function(d) if d then inbox_push(box, {type = "stdout", data = d}) end end,
    on_stderr = function(d) if d then inbox_push(box, {type = "stderr", data = d}) end end,
    on_exit = function(code, sig) inbox_push(box, {type = "exited", exit_code = code, signal = sig}) end,
  }
  if not proc then return nil, msg end
  local stdin = params.stdin
  if stdin and stdin ~= null then proc:write(stdin) end
  if stdin or not keep_stdin then proc:close_stdin() end
  return proc
end

-- A program that cannot start gives exit code 127 and a line on stderr, as
-- the bundled provider reports it.
local function not_started(box, argv, msg)
  inbox_push(box, {type = "stderr", data = ("smolwf: %s: %s\n"):format(argv[1], tostring(msg))})
  inbox_push(box, {type = "exited", exit_code = 127})
end

-- Wall and idle timeouts (milliseconds): TERM the group, KILL after a grace.
local function arm_timeouts(proc, params, outcome)
  local timers = {}
  local function expire(kind)
    if outcome.timed_out then return end
    outcome.timed_out = kind
    proc:kill("TERM")
    timers.grace = core.timer(KILL_GRACE, function() proc:kill("KILL") end)
  end
  local wall, idle = params.timeout_ms, params.idle_timeout_ms
  if type(wall) == "number" then timers.wall = core.timer(wall / 1000, function() expire("wall") end) end
  if type(idle) == "number" then
    local seconds = idle / 1000
    local function idle_check()
      local quiet = core.now() - outcome.last_output
      if quiet >= seconds then return expire("idle") end
      timers.idle = core.timer(seconds - quiet, idle_check)
    end
    timers.idle = core.timer(seconds, idle_check)
  end
  return timers
end

local function stop_timers(timers)
  for _, t in pairs(timers or {}) do t:stop() end
end

-- The captured copy a result carries: the first `cap` bytes of each stream.
local function new_outcome(cap)
  return {last_output = core.now(), cap = cap, stdout = {n = 0}, stderr = {n = 0}}
end

-- Streams one item to the request and keeps it in the copy; true at exit.
local function deliver(req, item, outcome)
  req:event(item)
  if item.type == "exited" then
    outcome.exit_code, outcome.signal = item.exit_code, item.signal
    return true
  end
  if item.type == "dropped" then return false end
  outcome.last_output = core.now()
  local buf, cap = outcome[item.type], outcome.cap
  local room = cap and cap - buf.n or #item.data
  if #item.data > room then outcome[item.type .. "_truncated"] = true end
  if room > 0 then
    local piece = #item.data > room and item.data:sub(1, room) or item.data
    buf[#buf + 1], buf.n = piece, buf.n + #piece
  end
  return false
end

local function result_of(outcome, running)
  local r = {exit_code = outcome.exit_code or -1, signal = outcome.signal, timed_out = outcome.timed_out,
    stdout = table.concat(outcome.stdout), stderr = table.concat(outcome.stderr),
    stdout_truncated = outcome.stdout_truncated, stderr_truncated = outcome.stderr_truncated,
    running = running or nil}
  outcome.stdout, outcome.stderr = {n = outcome.stdout.n}, {n = outcome.stderr.n}
  return r
end

-- Delivers buffered items until the exit (true) or the deadline (false).
local function pump(req, box, outcome, deadline)
  while true do
    local items = inbox_take(box, deadline)
    if not items then return false end
    local exited = false
    for _, item in ipairs(items) do
      exited = deliver(req, item, outcome) or exited
    end
    if exited then return true end
  end
end

local function new_process_id()
  nprocesses = nprocesses + 1
  return "h" .. nprocesses
end

function methods.exec(params, req)
  local s = session_of(params)
  local box, outcome = new_inbox(nil), new_outcome(params.max_output_bytes)
  local proc, msg = start_process(s, params, box, false)
  if not proc then not_started(box, params.argv, msg) end
  local timers = proc and arm_timeouts(proc, params, outcome)
  local id = proc and tostring(proc.pid) or new_process_id()
  s.processes[id] = {id = id, proc = proc, box = box, outcome = outcome, exec = true}   -- for `kill`
  req:event{type = "started", process_id = id}
  local ok, err = pcall(pump, req, box, outcome)
  s.processes[id] = nil
  stop_timers(timers)
  if proc then
    if not ok then proc:kill("KILL") end
    proc:close()
  end
  if not ok then error(err, 0) end
  return result_of(outcome)
end

function methods.spawn(params, req)
  local s = session_of(params)
  local box = new_inbox(SPAWN_BUFFER_BYTES)
  local proc, msg = start_process(s, params, box, true)
  if not proc then not_started(box, params.argv, msg) end
  local id = proc and tostring(proc.pid) or new_process_id()
  local p = {id = id, proc = proc, box = box, outcome = new_outcome(nil)}
  p.timers = proc and arm_timeouts(proc, params, p.outcome)
  s.processes[id] = p
  req:event{type = "started", process_id = id}
  return {process_id = id}
end

-- A process of the session (an exec's only for `kill`).
local function process_of(params, op)
  local s = session_of(params)
  local p = s.processes[params.process_id]
  if not p or p.done or (p.exec and op ~= "kill") then
    server.fail("unknown_process", ("%s: no running process `%s`"):format(op, tostring(params.process_id)))
  end
  return p
end

function methods.wait(params, req)
  local p = process_of(params, "wait")
  local deadline = type(params.timeout_ms) == "number" and core.now() + params.timeout_ms / 1000 or nil
  local exited = pump(req, p.box, p.outcome, deadline)
  if exited then
    p.done = true
    stop_timers(p.timers)
    if p.proc then p.proc:close() end
  end
  return result_of(p.outcome, not exited)
end

function methods.kill(params)
  local p = process_of(params, "kill")
  if p.proc then p.proc:kill(params.signal or "TERM") end
  return {}
end

function methods.write_stdin(params)
  local p = process_of(params, "write_stdin")
  if p.proc then
    if params.data and params.data ~= "" then p.proc:write(params.data) end
    if params.eof then p.proc:close_stdin() end
  end
  return {}
end

return methods
