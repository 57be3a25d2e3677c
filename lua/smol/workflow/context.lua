-- The `ctx` a step's run function receives: the sandbox session's methods
-- (opened lazily), ctx:sh, ctx.log, ctx:save_artifact, and the step's
-- inputs, matrix values and params.
--
-- The context talks to the runner only through a `bridge` table:
--   bridge:session()              the step's session (opens it on first use)
--   bridge:output(stream, chunk)  raw output bytes, for logs and the live view
--   bridge:log(message)           ctx.log
--   bridge:artifact(path, name)   copies out of the session, returns the report path
--   bridge:exit_code(code)        the last command's exit code
--   bridge:command_started()      a command starts (its stderr tail starts afresh)
--   bridge:flush_output()         a command ended: output held back for masking goes out
local M = {}

local STDERR_TAIL_LINES = 10

-- File operations passed straight to the session (see smol.sandbox).
local PASSTHROUGH = { "write_file", "read_file", "create_dir_all", "remove",
  "create_temp_dir", "stat", "list_dir" }

local CommandFailed = {
  __tostring = function(e) return e.message end,
}

local function tail_lines(text, n)
  local lines = {}
  for line in (text or ""):gmatch("[^\n]+") do lines[#lines + 1] = line end
  return table.concat(lines, "\n", math.max(1, #lines - n + 1), #lines)
end

local function describe_end(r)
  if r.timed_out then return ("timed out (%s)"):format(tostring(r.timed_out)) end
  if r.signal then return ("was killed by signal %s (exit code %d)"):format(r.signal, r.exit_code) end
  return ("failed with exit code %d"):format(r.exit_code)
end

-- The error ctx:sh raises on a non-zero exit: names the command, the exit
-- code and the last lines of stderr; keeps the result for retry predicates.
function M.command_failed(cmd, r)
  local msg = ("command `%s` %s"):format(cmd, describe_end(r))
  local text = require "smol.workflow.text"
  local tail = tail_lines(r.stderr, STDERR_TAIL_LINES)
  if tail ~= "" and text.is_binary(tail) then   -- noise in every report: say what it is
    msg = msg .. "\nstderr: " .. text.binary_summary(#r.stderr)
  elseif tail ~= "" then
    msg = msg .. "\nlast lines of stderr:\n" .. tail
  end
  return setmetatable({ code = "command_failed", message = msg, command = cmd,
    exit_code = r.exit_code, signal = r.signal, timed_out = r.timed_out,
    stderr = r.stderr, result = r }, CommandFailed)
end

-- The step's environment (workflow env, then step env) under the
-- command's own `env`, which wins.
local function merged_env(step_env, own)
  if next(step_env) == nil then return own end
  local env = {}
  for k, v in pairs(step_env) do env[k] = v end
  for k, v in pairs(own or {}) do env[k] = v end
  return env
end

-- A command's options as the session gets them: the step's env merged in,
-- output copied to the logs and the live view.
local function command_opts(ctx, opts)
  local bridge = ctx._bridge
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.env = merged_env(ctx._env, opts.env)
  local user_out, user_err = opts.on_stdout, opts.on_stderr
  o.on_stdout = function(chunk)
    if chunk then bridge:output("stdout", chunk) end
    if user_out then user_out(chunk) end
  end
  o.on_stderr = function(chunk)
    if chunk then bridge:output("stderr", chunk) end
    if user_err then user_err(chunk) end
  end
  return o
end

local Ctx = {}
local CTX_MT

-- ctx.exec{...} (a dot for a colon) would otherwise fail far from the mistake.
local function check_self(self, method)
  if getmetatable(self) ~= CTX_MT then
    error(("call ctx:%s(...) with a colon, not ctx.%s(...)"):format(method, method), 3)
  end
end

function Ctx:session()
  check_self(self, "session")
  return self._bridge:session()
end

-- A position the session's argument checks may give ("sandbox.lua:381: "):
-- it names the engine's line, not the step's.
local ENGINE_POSITION = "^[^:\n]*smol/[%w_/]*%.lua:%d+: "

-- Calls session[method]. A misuse the session reports (a string error, e.g.
-- "argv[2] must be a string") is raised again at `level` counted from here,
-- i.e. at the step's own line; runtime errors (tables, cancellation) pass
-- through unchanged. `level` must not cross a tail call (they drop frames).
local function session_call(level, session, method, ...)
  local result = table.pack(pcall(session[method], session, ...))
  if result[1] then return table.unpack(result, 2, result.n) end
  local err = result[2]
  if type(err) == "string" then
    -- Called through pcall, the session's checks often carry no position
    -- at all; a position in the user's own code (a callback) is kept.
    local bare = err:gsub(ENGINE_POSITION, "", 1)
    if not bare:find("^[^\n:]*:%d+: ") then error(bare, level) end
  end
  error(err, 0)
end

-- exec for ctx:exec and ctx:sh, called directly by them (see `level`).
local function run_exec(self, opts)
  self._bridge:command_started()
  local result = table.pack(pcall(session_call, 5, self:session(), "exec", command_opts(self, opts)))
  self._bridge:flush_output()
  if not result[1] then error(result[2], 0) end
  local r = result[2]
  self._bridge:exit_code(r.exit_code)
  return r
end

function Ctx:exec(opts)
  check_self(self, "exec")
  if type(opts) ~= "table" then error("bad argument #1 to 'exec' (table expected, got " .. type(opts) .. ")", 2) end
  local r = run_exec(self, opts)
  return r
end

function Ctx:spawn(opts)
  check_self(self, "spawn")
  if type(opts) ~= "table" then error("bad argument #1 to 'spawn' (table expected, got " .. type(opts) .. ")", 2) end
  self._bridge:command_started()
  local p = session_call(3, self:session(), "spawn", command_opts(self, opts))
  self._processes[#self._processes + 1] = p
  return p
end

-- Runs `sh -c cmd`; a non-zero exit raises the command_failed error.
-- `opts` takes exec's options (cwd, env, stdin, timeout...).
function Ctx:sh(cmd, opts)
  check_self(self, "sh")
  if type(cmd) ~= "string" then error("bad argument #1 to 'sh' (string expected, got " .. type(cmd) .. ")", 2) end
  local exec_opts = { "sh", "-c", cmd }
  for k, v in pairs(opts or {}) do exec_opts[k] = v end
  local r = run_exec(self, exec_opts)
  if r.exit_code ~= 0 or r.timed_out then error(M.command_failed(cmd, r), 0) end
  return r
end

local Skip = { __tostring = function(e) return "skipped: " .. e.message end }

-- Ends the step as `skipped` with `reason` (its dependents are skipped too).
function Ctx:skip(reason)
  check_self(self, "skip")
  if reason ~= nil and type(reason) ~= "string" then error("bad argument #1 to 'skip' (string expected, got " .. type(reason) .. ")", 2) end
  error(setmetatable({ code = "skipped", message = reason or "skipped by the step" }, Skip), 0)
end

function M.is_skip(err)
  return getmetatable(err) == Skip
end

function Ctx:save_artifact(path, name)
  check_self(self, "save_artifact")
  if type(path) ~= "string" then error("bad argument #1 to 'save_artifact' (string expected, got " .. type(path) .. ")", 2) end
  if name ~= nil and type(name) ~= "string" then error("bad argument #2 to 'save_artifact' (string expected, got " .. type(name) .. ")", 2) end
  return self._bridge:artifact(path, name)
end

for _, method in ipairs(PASSTHROUGH) do
  Ctx[method] = function(self, ...)
    check_self(self, method)
    local results = table.pack(session_call(3, self:session(), method, ...))
    return table.unpack(results, 1, results.n)
  end
end

-- Kills the processes the step spawned that may still run: a step's
-- processes never outlive it (timeouts and cancellation included).
function M.finish(ctx)
  for _, p in ipairs(ctx._processes) do pcall(p.kill, p, "KILL") end
  ctx._processes = {}
  ctx._bridge:flush_output()
end

local function known_fields()
  local names = { "inputs", "matrix", "params", "env", "secrets", "step", "id", "attempt", "log", "report_dir" }
  for k in pairs(Ctx) do names[#names + 1] = k end
  table.sort(names)
  return table.concat(names, ", ")
end

CTX_MT = {
  __index = function(_, key)
    local method = Ctx[key]
    if method then return method end
    error(("ctx has no field '%s' (known: %s)"):format(tostring(key), known_fields()), 2)
  end,
}

-- fields: inputs, matrix, params, env, step, id, attempt, report_dir; the
-- table becomes the ctx (a fresh one each time: not copied again).
function M.new(bridge, fields)
  local ctx = fields
  ctx._bridge, ctx._processes = bridge, {}
  ctx.matrix = ctx.matrix or {}
  ctx._env = ctx.env or {}
  ctx.env = {}
  for k, v in pairs(ctx._env) do ctx.env[k] = v end
  -- ctx.log(...) and ctx:log(...) both work: drop ctx when passed as self.
  ctx.log = function(first, ...)
    local args = table.pack(first, ...)
    local from = first == ctx and 2 or 1
    local parts = {}
    for i = from, args.n do parts[#parts + 1] = tostring(args[i]) end
    bridge:log(table.concat(parts, " "))
  end
  return setmetatable(ctx, CTX_MT)
end

return M
