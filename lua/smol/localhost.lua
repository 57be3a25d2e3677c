--[[
smol.localhost: `sandbox.host{cwd = "."}`, the session methods of
smol.sandbox run directly on this machine with no provider and no
isolation. Same names, same results, same error values: a workflow step
written against a sandbox runs unchanged on the host.

Relative paths resolve against the session's cwd; any path is allowed (this
is no sandbox). Commands run as process-group leaders, so kill and timeouts
reach their children too. Spawned output is buffered (at most
SPAWN_BUFFER_BYTES per stream, oldest dropped first, as a provider does)
until :wait() delivers it.
]]

local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local lfs = require "lfs"

local localhost = {}

local SPAWN_BUFFER_BYTES = 1024 * 1024
local KILL_GRACE = 2    -- seconds between TERM and KILL on a timeout

local Host = {}
Host.__index = Host
Host.__name = "smol.localhost.session"

local Process = {}
Process.__index = Process

--[[ Paths and errors ]]

local function fail(op, path, msg, errno)
  errors.raise{code = core.error_code(errno), op = op, path = path, message = tostring(msg)}
end

function Host:resolve(path)
  if path:sub(1, 1) == "/" then return path end
  if path == "." or path == "" then return self.cwd end
  return self.cwd .. "/" .. path
end

local function check_path(self, op, path)
  if getmetatable(self) ~= Host then error(("host: %s: expected a host session"):format(op), 3) end
  if self._closed then error(("host: %s: attempt to use a closed session"):format(op), 3) end
  if type(path) ~= "string" then error(("host: %s: path must be a string"):format(op), 3) end
  return self:resolve(path)
end

--[[ Opening ]]

function localhost.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("sandbox.host: expected a table of options", 2) end
  local cwd = opts.cwd or "."
  if type(cwd) ~= "string" then error("sandbox.host: cwd must be a string", 2) end
  if cwd:sub(1, 1) ~= "/" then cwd = lfs.currentdir() .. (cwd == "." and "" or "/" .. cwd) end
  if lfs.attributes(cwd, "mode") ~= "directory" then
    errors.raise{code = "not_found", op = "open", path = cwd, message = "cwd is not a directory: " .. cwd}
  end
  return setmetatable({id = "host", cwd = cwd, program = "host", _spawned = setmetatable({}, {__mode = "k"}),
    capabilities = {exec = true, process = true, timeout = true, signal = true,
                    output_limit = true, fs_extra = true, isolation = "none"}}, Host)
end

-- Like a provider's close: every process the session spawned and nobody
-- waited for is killed (its whole group). Idempotent.
function Host:close()
  if self._closed then return end
  self._closed = true
  for p in pairs(self._spawned) do
    if not p._done and p._proc then
      p._proc:kill("KILL")
      p._proc:close()   -- its handles go once it is dead
    end
  end
end
Host.__close = Host.close

--[[ File operations ]]

function Host:write_file(path, data, opts)
  local full = check_path(self, "write_file", path)
  if type(data) ~= "string" then error("host: write_file: data must be a string", 2) end
  local f, msg, errno = io.open(full, (opts and opts.append) and "ab" or "wb")
  if not f then fail("write_file", path, msg, errno) end
  local ok, wmsg, werrno = f:write(data)
  f:close()
  if not ok then fail("write_file", path, wmsg, werrno) end
  if opts and opts.mode then
    local okm, mmsg, merr = core.chmod(full, opts.mode)
    if not okm then errors.raise{code = core.error_code(merr), op = "write_file", path = path, message = mmsg} end
  end
end

function Host:read_file(path, opts)
  local full = check_path(self, "read_file", path)
  local f, msg, errno = io.open(full, "rb")
  if not f then fail("read_file", path, msg, errno) end
  if opts and opts.offset then f:seek("set", opts.offset) end
  local data, rmsg, rerrno = f:read(opts and opts.length or "a")
  local eof = f:read(0) == nil
  f:close()
  if data == nil and rmsg then fail("read_file", path, rmsg, rerrno) end
  if opts and (opts.offset or opts.length) then return data or "", eof end
  return data or ""
end

function Host:create_dir_all(path)
  local full = check_path(self, "create_dir_all", path)
  local prefix = full:sub(1, 1) == "/" and "" or "."
  for part in full:gmatch("[^/]+") do
    prefix = prefix .. "/" .. part
    local mode = lfs.attributes(prefix, "mode")
    if mode == nil then
      local ok, msg, errno = lfs.mkdir(prefix)
      if not ok and lfs.attributes(prefix, "mode") ~= "directory" then fail("create_dir_all", path, msg, errno) end
    elseif mode ~= "directory" then
      fail("create_dir_all", path, prefix .. ": not a directory", 20)
    end
  end
end

local function remove_tree(full, path)
  if lfs.symlinkattributes(full, "mode") == "directory" then
    for name in lfs.dir(full) do
      if name ~= "." and name ~= ".." then remove_tree(full .. "/" .. name, path) end
    end
  end
  local ok, msg, errno = os.remove(full)
  if not ok then fail("remove", path, msg, errno) end
end

function Host:remove(path)
  local full = check_path(self, "remove", path)
  if not lfs.symlinkattributes(full) then fail("remove", path, full .. ": no such file or directory", 2) end
  remove_tree(full, path)
end

function Host:create_temp_dir(prefix)
  check_path(self, "create_temp_dir", ".")
  local base = os.getenv("TMPDIR") or "/tmp"
  local dir, err = core.mkdtemp(base .. "/" .. (prefix or "tmp-") .. "XXXXXX")
  if not dir then fail("create_temp_dir", nil, err, nil) end
  return dir
end

local MODE_TYPE = {file = "file", directory = "dir", link = "symlink"}

function Host:stat(path)
  local full = check_path(self, "stat", path)
  local a, msg, errno = lfs.symlinkattributes(full)
  if not a then fail("stat", path, msg, errno) end
  return {type = MODE_TYPE[a.mode] or "other", size = a.size,
          mode = tonumber(a.permissions:gsub("[^-]", "1"):gsub("-", "0"), 2), mtime = a.modification}
end

function Host:list_dir(path)
  local full = check_path(self, "list_dir", path)
  if lfs.attributes(full, "mode") ~= "directory" then
    fail("list_dir", path, full .. ": not a directory", lfs.attributes(full) and 20 or 2)
  end
  local entries = {}
  for name in lfs.dir(full) do
    if name ~= "." and name ~= ".." then
      local a = lfs.symlinkattributes(full .. "/" .. name) or {}
      entries[#entries + 1] = {name = name, type = MODE_TYPE[a.mode] or "other", size = a.size}
    end
  end
  table.sort(entries, function(x, y) return x.name < y.name end)
  return entries
end

--[[ Processes ]]

-- The host's environment as a map, plus the request's additions.
local function merged_env(extra)
  if not extra then return nil end
  local env = {}
  local f = io.open("/proc/self/environ", "rb")
  if f then
    for k, v in f:read("a"):gmatch("([^=%z]+)=([^%z]*)%z") do env[k] = v end
    f:close()
  end
  for k, v in pairs(extra) do env[k] = tostring(v) end
  return env
end

-- Output and exit of one process, buffered until a waiter takes them.
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

local function start_process(self, spec, argv, box, keep_stdin)
  local proc, msg, errname = core.spawn{
    file = argv[1], args = argv, cwd = self:resolve(spec.cwd or "."), env = merged_env(spec.env),
    stdin = true, stdout = "chunks", stderr = "chunks", process_group = true,
    on_stdout = function(d) if d then inbox_push(box, {type = "stdout", data = d}) end end,
    on_stderr = function(d) if d then inbox_push(box, {type = "stderr", data = d}) end end,
    on_exit = function(code, sig) inbox_push(box, {type = "exited", exit_code = code, signal = sig}) end,
  }
  if not proc then return nil, msg, errname end
  if spec.stdin then proc:write(spec.stdin) end
  if spec.stdin or not keep_stdin then proc:close_stdin() end
  return proc
end

-- A program that cannot start gives exit code 127 and a line on stderr, as
-- a provider reports it.
local function not_started(box, argv, msg)
  inbox_push(box, {type = "stderr", data = ("smolwf: %s: %s\n"):format(argv[1], tostring(msg))})
  inbox_push(box, {type = "exited", exit_code = 127})
end

-- Wall and idle timeouts: TERM the group, KILL after a grace.
local function arm_timeouts(proc, spec, outcome)
  local timers = {}
  local function expire(kind)
    if outcome.timed_out then return end
    outcome.timed_out = kind
    proc:kill("TERM")
    timers.grace = core.timer(KILL_GRACE, function() proc:kill("KILL") end)
  end
  if spec.timeout then timers.wall = core.timer(spec.timeout, function() expire("wall") end) end
  if spec.idle_timeout then
    local function idle_check()
      local quiet = core.now() - outcome.last_output
      if quiet >= spec.idle_timeout then return expire("idle") end
      timers.idle = core.timer(spec.idle_timeout - quiet, idle_check)
    end
    timers.idle = core.timer(spec.idle_timeout, idle_check)
  end
  return timers
end

local function stop_timers(timers)
  for _, t in pairs(timers or {}) do t:stop() end
end

-- Hands one item to the callbacks and the captured copy; true at exit.
local function deliver(item, callbacks, outcome)
  if callbacks.on_event then callbacks.on_event(item) end
  if item.type == "exited" then
    outcome.exit_code, outcome.signal = item.exit_code, item.signal
    return true
  end
  outcome.last_output = core.now()
  local cb = item.type == "stdout" and callbacks.on_stdout or item.type == "stderr" and callbacks.on_stderr
  if cb then cb(item.data) end
  local cap, buf = outcome.capture_limit, outcome[item.type]
  if buf and (not cap or buf.n < cap) then
    local piece = cap and item.data:sub(1, cap - buf.n) or item.data
    buf[#buf + 1], buf.n = piece, buf.n + #piece
    if #piece < #item.data then outcome[item.type .. "_truncated"] = true end
  elseif buf and #item.data > 0 then
    outcome[item.type .. "_truncated"] = true
  end
  return false
end

local function new_outcome(spec)
  local capture = spec.capture ~= false
  return {last_output = core.now(), capture_limit = spec.max_output_bytes,
          stdout = capture and {n = 0} or nil, stderr = capture and {n = 0} or nil}
end

local function result_of(outcome, running)
  local r = {exit_code = outcome.exit_code or -1, signal = outcome.signal, timed_out = outcome.timed_out,
    stdout_truncated = outcome.stdout_truncated, stderr_truncated = outcome.stderr_truncated,
    running = running or nil}
  if outcome.stdout then
    r.stdout, r.stderr = table.concat(outcome.stdout), table.concat(outcome.stderr)
    outcome.stdout, outcome.stderr = {n = outcome.stdout.n}, {n = outcome.stderr.n}
  end
  r.ok = r.exit_code == 0 and not r.timed_out and not running
  return r
end

-- Delivers buffered items until the exit (true) or the deadline (false).
local function pump(box, callbacks, outcome, deadline)
  while true do
    local items = inbox_take(box, deadline)
    if not items then return false end
    local exited = false
    for _, item in ipairs(items) do
      exited = deliver(item, callbacks, outcome) or exited
    end
    if exited then return true end
  end
end

local function check_argv(self, spec, op)
  if getmetatable(self) ~= Host then error(("host: %s: expected a host session"):format(op), 3) end
  if self._closed then error(("host: %s: attempt to use a closed session"):format(op), 3) end
  if type(spec) ~= "table" or type(spec[1]) ~= "string" then
    error(("host: %s: expected a table {argv..., options} with a string argv[1]"):format(op), 3)
  end
  local argv = {}
  for i, a in ipairs(spec) do argv[i] = tostring(a) end
  return argv
end

function Host:exec(spec)
  local argv = check_argv(self, spec, "exec")
  local box, outcome = new_inbox(nil), new_outcome(spec)
  local proc, msg = start_process(self, spec, argv, box, false)
  if not proc then not_started(box, argv, msg) end
  local timers = proc and arm_timeouts(proc, spec, outcome)
  if spec.on_event and proc then spec.on_event({type = "started", process_id = tostring(proc.pid)}) end
  local ok, err = pcall(pump, box, spec, outcome)
  stop_timers(timers)
  if not ok then
    if proc then proc:kill("KILL") proc:close() end
    error(err, 0)
  end
  if proc then proc:close() end
  local r = result_of(outcome)
  r.process_id, r.argv = proc and tostring(proc.pid), argv
  return r
end

function Host:spawn(spec)
  local argv = check_argv(self, spec, "spawn")
  local box = new_inbox(SPAWN_BUFFER_BYTES)
  local proc, msg = start_process(self, spec, argv, box, true)
  if not proc then not_started(box, argv, msg) end
  local p = setmetatable({process_id = proc and tostring(proc.pid) or "not_started", argv = argv,
    session = self, _proc = proc, _box = box, _outcome = new_outcome(spec),
    _callbacks = {on_stdout = spec.on_stdout, on_stderr = spec.on_stderr, on_event = spec.on_event}}, Process)
  self._spawned[p] = true
  if spec.on_event then spec.on_event({type = "started", process_id = p.process_id}) end
  return p
end

local function check_process(p, op)
  if p.session._closed then error(("host: process:%s: its session is closed"):format(op), 3) end
end

function Process:wait(opts)
  check_process(self, "wait")
  opts = opts or {}
  local cb = self._callbacks
  local callbacks = {on_stdout = opts.on_stdout or cb.on_stdout, on_stderr = opts.on_stderr or cb.on_stderr,
                     on_event = opts.on_event or cb.on_event}
  if self._done then
    errors.raise{code = "unknown_process", op = "wait", path = self.process_id, message = "process already waited for"}
  end
  local deadline = opts.timeout and core.now() + opts.timeout
  local ok, exited = pcall(pump, self._box, callbacks, self._outcome, deadline)
  if not ok then error(exited, 0) end
  if exited then
    self._done = true
    if self._proc then self._proc:close() end
  end
  local r = result_of(self._outcome, not exited)
  r.argv = table.move(self.argv, 1, #self.argv, 1, {})
  return r
end

function Process:kill(signal)
  check_process(self, "kill")
  if self._done or not self._proc then
    errors.raise{code = "unknown_process", op = "kill", path = self.process_id, message = "process has exited"}
  end
  self._proc:kill(signal or "TERM")
end

function Process:write(data)
  check_process(self, "write")
  if type(data) ~= "string" then error("host: process:write: data must be a string", 2) end
  if not self._proc then return end
  self._proc:write(data)
end

function Process:close_stdin()
  check_process(self, "close_stdin")
  if self._proc then self._proc:close_stdin() end
end

function Host:__tostring()
  return ("host session (%s)"):format(self.cwd)
end

localhost.Host, localhost.Process = Host, Process
return localhost
