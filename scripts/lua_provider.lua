--[[
A complete sandbox provider written in Lua: every session is a private
directory on this machine (no isolation, like the bundled provider's
local/default profile), commands run there as ordinary processes.

Run it with:   smolwf provider serve scripts/lua_provider.lua
Use it with:   local server = require "smol.provider.server"
               local sb = sandbox.open{program = server.program("scripts/lua_provider.lua")}

The file returns a table of methods; `smolwf provider serve` does the rest
(JSON Lines, ids, base64, one task per request, validation of params, error
replies). A method gets the params (`X_base64` fields also decoded as `X`)
and the request (`req:event{...}` sends an event), returns its result, or
raises server.fail(code, message).

What this example leaves out: the part-2 extensions (it announces none but
"isolation": "none"), and race-free path checks (it resolves symlinks
itself, component by component, which a concurrent command could defeat;
the bundled provider uses openat2 with RESOLVE_BENEATH instead, and opens
files without blocking, checking their type on the open descriptor).
]]
local core = require "smol.core"
local task = require "smol.task"
local lfs = require "lfs"
local server = require "smol.provider.server"

local sessions = {}     -- id -> {id, root, workspace, tmp, cwd, processes = {proc = true}}
local counter = 0

--[[ Paths ]]

-- Lexically normalizes an absolute path; nil when `..` climbs above "/".
local function normalize(path)
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return "/" .. table.concat(parts, "/")
end

local function inside(path, dir)
  return path == dir or path:sub(1, #dir + 1) == dir .. "/"
end

local function area_of(s, full)
  if not full then return nil end
  if inside(full, s.workspace) then return s.workspace end
  if inside(full, s.tmp) then return s.tmp end
end

local MAX_LINKS = 40

-- The host path for a session path; refuses anything outside the
-- session's workspace and temp area, following symlinks only while they
-- stay inside (a final symlink itself is kept when keep_link is true).
local function resolve(s, path, op, keep_link)
  local full = normalize(path:sub(1, 1) == "/" and path or (s.cwd .. "/" .. path))
  local base, links = area_of(s, full), 0
  local walked, rest = base, full and full:sub(#(base or "") + 2) or ""
  while base and rest ~= "" do
    local part, tail = rest:match("^([^/]+)/?(.*)$")
    local next_path = walked .. "/" .. part
    local target = lfs.symlinkattributes(next_path, "target")
    if keep_link and tail == "" then target = nil end
    if target and links < MAX_LINKS then
      links = links + 1
      full = normalize((target:sub(1, 1) == "/" and target or (walked .. "/" .. target))
        .. (tail ~= "" and "/" .. tail or ""))
      base = area_of(s, full)
      walked, rest = base, full and full:sub(#(base or "") + 2) or ""
    else
      walked, rest = next_path, tail
    end
  end
  if not base then
    server.fail("permission_denied", ("%s: `%s` is outside the sandbox"):format(op, path))
  end
  return walked
end

local function session_of(params)
  return sessions[params.session.id]
    or server.fail("unknown_session", ("unknown session `%s`"):format(params.session.id))
end

--[[ Running programs ]]

-- Starts argv in its own process group; on_chunk(stream, data) sees the
-- output as it comes. Returns a function that waits for the end and
-- returns exit_code, signal_name. A program that cannot start ends with
-- 127 and a message on stderr, as the protocol asks.
local function start(s, argv, opts, on_chunk)
  local done = task.event()
  local proc, err = core.spawn{file = argv[1], args = argv, cwd = opts.cwd, env = opts.env,
    stdin = opts.stdin ~= nil, stdout = "chunks", stderr = "chunks", process_group = true,
    on_stdout = function(data) if data then on_chunk("stdout", data) end end,
    on_stderr = function(data) if data then on_chunk("stderr", data) end end,
    on_exit = function(code, signal) done:set(code, signal) end}
  if not proc then
    on_chunk("stderr", ("%s: %s\n"):format(argv[1], err))
    return function() return 127 end
  end
  s.processes[proc] = done
  if opts.stdin then proc:write(opts.stdin) end
  if opts.stdin ~= nil then proc:close_stdin() end
  return function()
    local code, signal = done:wait()
    s.processes[proc] = nil
    proc:close()
    return code, signal
  end
end

-- Runs argv to completion (see start).
local function run(s, argv, opts, on_chunk)
  return start(s, argv, opts, on_chunk)()
end

local function command_env(s, extra)
  local env = {PATH = "/usr/local/bin:/usr/bin:/bin", HOME = s.workspace, LANG = "C.UTF-8", TMPDIR = s.tmp}
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

local function command_opts(s, params)
  return {cwd = params.cwd and resolve(s, params.cwd, "exec") or s.cwd,
    env = command_env(s, params.env), stdin = params.stdin or ""}
end

--[[ Methods ]]

local methods = {}

-- rm -r without following symlinks; synchronous, so a cancelled request
-- cannot leave it half done.
local function remove_tree(path)
  local mode = lfs.symlinkattributes(path, "mode")
  if mode == "directory" then
    for name in lfs.dir(path) do
      if name ~= "." and name ~= ".." then remove_tree(path .. "/" .. name) end
    end
    lfs.rmdir(path)
  elseif mode then
    os.remove(path)
  end
end

-- Kills the session's processes (their whole groups), waits until they
-- are gone (a killed process may still be writing into the directory),
-- then removes the session's files.
local function remove_session(s)
  sessions[s.id] = nil
  local exits = {}
  for proc, done in pairs(s.processes) do
    proc:kill("KILL")
    exits[#exits + 1] = done
  end
  for _, done in ipairs(exits) do done:wait() end
  remove_tree(s.root)
end

-- Fills the new session s: the workspace copy, then its cwd.
local function prepare(s, params)
  local host_path = params.workspace_sync and params.workspace_sync.host_path
  if host_path and host_path ~= "" then
    if not lfs.attributes(host_path) then server.fail("not_found", "workspace `" .. host_path .. "` does not exist") end
    local code = run(s, {"cp", "-a", "--", host_path .. "/.", s.workspace}, {}, function() end)
    if code ~= 0 then server.fail("io_error", "cannot copy workspace `" .. host_path .. "`") end
  end
  if params.cwd then
    s.cwd = resolve(s, params.cwd, "open")
    if lfs.attributes(s.cwd, "mode") ~= "directory" then server.fail("not_found", "cwd `" .. params.cwd .. "` does not exist") end
  end
end

-- A session: ROOT/workspace (a copy of host_path) and ROOT/tmp; nothing
-- is left behind when opening fails.
function methods.open(params)
  counter = counter + 1
  local root = assert(core.mkdtemp("/tmp/lua-provider-XXXXXX"))
  local s = {id = "lua_" .. counter, root = root, workspace = root .. "/workspace",
    tmp = root .. "/tmp", processes = {}}
  assert(lfs.mkdir(s.workspace)) assert(lfs.mkdir(s.tmp))
  s.cwd = s.workspace
  sessions[s.id] = s
  local ok, err = pcall(prepare, s, params)
  if not ok then
    remove_session(s)
    error(err, 0)
  end
  return {id = s.id, cwd = s.cwd, capabilities = {exec = true, isolation = "none"}}
end

function methods.close(params)
  remove_session(session_of(params))
  return {}
end

function methods.exec(params, req)
  local s = session_of(params)
  local out = {stdout = {}, stderr = {}}
  req:event{type = "started"}
  local code, signal = run(s, params.argv, command_opts(s, params), function(stream, data)
    out[stream][#out[stream] + 1] = data
    req:event{type = stream, data = data}
  end)
  req:event{type = "exited", exit_code = code, signal = signal}
  return {exit_code = code, signal = signal,
    stdout = table.concat(out.stdout), stderr = table.concat(out.stderr)}
end

-- Without the "process" capability a spawned process's output is dropped.
function methods.spawn(params, req)
  local s = session_of(params)
  counter = counter + 1
  local id = "proc_" .. counter
  local wait = start(s, params.argv, command_opts(s, params), function() end)
  task.spawn(wait)   -- reaps it; the reply goes now, while it runs
  req:event{type = "started", process_id = id}
  return {process_id = id}
end

local function file_error(op, path, err)
  local code = err:find("No such file") and "not_found" or err:find("Is a directory") and "is_a_directory"
    or err:find("Not a directory") and "not_a_directory" or "io_error"
  server.fail(code, ("%s `%s`: %s"):format(op, path, err))
end

--[[
Regular files only: opening a FIFO blocks until another process opens its
other end, and this provider's one loop would wait with it (every request
of every session). Checked before the open, so a FIFO swapped in between
still blocks: the race the header leaves out.
]]
local function regular_only(path, op, given)
  local mode = lfs.attributes(path, "mode")
  if mode == "directory" then file_error(op, given, "Is a directory") end
  if mode and mode ~= "file" then
    server.fail("invalid_request", ("%s `%s`: a %s, not a regular file"):format(op, given, mode))
  end
end

function methods.write_file(params)
  local path = resolve(session_of(params), params.path, "write_file")
  regular_only(path, "write_file", params.path)
  local f, err = io.open(path, "wb")
  if not f then file_error("write_file", params.path, err) end
  f:write(params.content)
  f:close()
  return {}
end

function methods.read_file(params)
  local path = resolve(session_of(params), params.path, "read_file")
  regular_only(path, "read_file", params.path)
  local f, err = io.open(path, "rb")
  if not f then file_error("read_file", params.path, err) end
  local content = f:read("a")
  f:close()
  return {content = content}
end

function methods.create_dir_all(params)
  local path = resolve(session_of(params), params.path, "create_dir_all")
  local walked = ""
  for part in path:gmatch("[^/]+") do
    walked = walked .. "/" .. part
    local mode = lfs.attributes(walked, "mode")
    if mode == nil then
      local ok, err = lfs.mkdir(walked)
      if not ok then file_error("create_dir_all", params.path, err) end
    elseif mode ~= "directory" then
      server.fail("not_a_directory", ("create_dir_all `%s`: `%s` is a file"):format(params.path, walked))
    end
  end
  return {}
end

function methods.remove(params)
  local s = session_of(params)
  local path = resolve(s, params.path, "remove", true)
  if not lfs.symlinkattributes(path, "mode") then server.fail("not_found", ("remove `%s`: no such file"):format(params.path)) end
  remove_tree(path)
  return {}
end

function methods.create_temp_dir(params)
  local s = session_of(params)
  local prefix = (params.prefix or "tmp"):gsub("[^%w._-]", "_")
  return {path = assert(core.mkdtemp(s.tmp .. "/" .. prefix .. "XXXXXX"))}
end

return methods
