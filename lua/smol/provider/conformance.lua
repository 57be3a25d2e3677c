--[[
The provider conformance kit, as a library: runs the protocol conformance
suite (docs/protocol.md) against any provider executable and reports
one result per check. `smolwf provider-check` prints it; specs assert it.

  local conformance = require "smol.provider.conformance"
  local report = conformance.run{
    program = "/path/to/provider",  -- started as PROGRAM ARGS... serve
    args = {},                      -- extra arguments before "serve"
    profile = "local/default",      -- "PROVIDER/NAME" sent with open
    on_result = function(r) print(conformance.format(r)) end,
    stderr_sink = function(line) end, -- the provider's stderr (default: dropped)
    groups = {"files", "exec"},     -- only these groups (default: all)
    open_timeout = 10,              -- seconds the first open may take
  }
  -- report.passed, report.failed, report.skipped, report.results[i] =
  --   {group, name, status = "pass"|"fail"|"skip", expected, got, blocked}
  -- report.blocked: how many of the skipped needed a session (see below)

The checks come in groups; each group gets a fresh provider process (and a
fresh session when it needs one), so a provider that crashes in one group
is still tested by the others. Extension groups are skipped, check by
check, when the session does not announce their capability. The kit drives
the event loop itself: call it outside any smol.task task.

Before the groups, one session is opened (and closed) on a fresh provider.
When that fails (an unknown profile, a refusal, no reply within
open_timeout, the provider exiting) the report has one failure for open
with the provider's reply, and every check that needs a session is skipped
with `blocked = true` instead of failing one by one for the same cause.
]]
local wire = require "smol.provider.conformance.wire"
local hostside = require "smol.provider.conformance.hostside"
local group_run = require "smol.provider.conformance.group_run"

local conformance = {}

-- Seconds the first open may take (bwrap profiles copy the workspace).
conformance.OPEN_TIMEOUT = 10

-- Group lists, in the order they run.
local GROUP_MODULES = {
  "smol.provider.conformance.checks_session",
  "smol.provider.conformance.checks_files",
  "smol.provider.conformance.checks_exec",
  "smol.provider.conformance.checks_lifecycle",
  "smol.provider.conformance.checks_badlines",
  "smol.provider.conformance.checks_strict",
  "smol.provider.conformance.checks_hostile",
  "smol.provider.conformance.checks_extensions",
  "smol.provider.conformance.checks_archive",
}

function conformance.groups()
  local all = {}
  for _, name in ipairs(GROUP_MODULES) do
    for _, group in ipairs(require(name)) do all[#all + 1] = group end
  end
  return all
end

local function check_options(opts)
  if type(opts) ~= "table" then error("conformance.run: options table expected", 3) end
  local program = opts.program
  if not ((type(program) == "string" and program ~= "") or (type(program) == "table" and program[1])) then
    error("conformance.run: `program` must be a path or an argv list", 3)
  end
  local provider, name = (opts.profile or "auto/default"):match("^([^/]+)/([^/]+)$")
  if not provider then
    error("conformance.run: `profile` must look like PROVIDER/NAME, got "
      .. tostring(opts.profile), 3)
  end
  local timeout = opts.open_timeout
  if timeout ~= nil and (type(timeout) ~= "number" or timeout <= 0) then
    error("conformance.run: `open_timeout` must be a positive number of seconds, got "
      .. tostring(timeout), 3)
  end
  return {provider = provider, name = name}
end

local function provider_argv(opts)
  local program = opts.program
  local argv = type(program) == "table" and table.move(program, 1, #program, 1, {}) or {program}
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = a end
  argv[#argv + 1] = "serve"
  return argv
end

local function selected(opts, group)
  if not opts.groups then return true end
  for _, name in ipairs(opts.groups) do
    if name == group.name then return true end
  end
  return false
end

local function record(report, opts, result)
  report.results[#report.results + 1] = result
  local key = ({pass = "passed", fail = "failed", skip = "skipped"})[result.status]
  report[key] = report[key] + 1
  if result.blocked then report.blocked = report.blocked + 1 end
  if opts.on_result then opts.on_result(result) end
end

local function in_task()
  local ok, task = pcall(require, "smol.task")
  return ok and type(task) == "table" and task.in_task and task.in_task()
end

-- Runs the suite; returns the report (see the top of this file).
function conformance.run(opts)
  local profile = check_options(opts)
  if in_task() then error("conformance.run: call it outside smol.task tasks", 2) end
  local argv = provider_argv(opts)
  local report = {passed = 0, failed = 0, skipped = 0, blocked = 0, results = {}}
  local ws, files = hostside.make_workspace()
  report.workspace = ws   -- removed at the end; specs check that it is gone
  local env = {
    argv = argv, profile = profile, ws_host = ws, ws_files = files,
    token = hostside.token(), stderr_sink = opts.stderr_sink,
  }
  local ok, err = pcall(function()
    local open_failed = group_run.preflight(env, opts.open_timeout or conformance.OPEN_TIMEOUT)
    if open_failed then record(report, opts, open_failed) end
    for _, group in ipairs(conformance.groups()) do
      if selected(opts, group) then
        group_run.run_group(env, group, function(r) record(report, opts, r) end)
      end
    end
  end)
  for _, name in ipairs(GROUP_MODULES) do   -- nothing a check started outlives the run
    local checks = require(name)
    if checks.sweep then checks.sweep() end
  end
  hostside.remove_tree(ws)
  if not ok then error(err, 0) end
  return report
end

-- One line for a result: "FAIL group: name: expected ...; got ...".
function conformance.format(r)
  local label = ({pass = "PASS", fail = "FAIL", skip = "SKIP"})[r.status]
  local line = string.format("%s %s: %s", label, r.group, r.name)
  if r.status == "skip" then return line .. ": skipped, " .. tostring(r.got) end
  return string.format("%s: expected %s; got %s", line, tostring(r.expected), tostring(r.got))
end

function conformance.summary(report)
  local s = string.format("%d passed, %d failed", report.passed, report.failed)
  if report.skipped > 0 then s = s .. string.format(", %d skipped", report.skipped) end
  local blocked = report.blocked or 0
  if blocked > 0 and blocked == report.skipped then
    s = s .. " (they need a session, and open failed)"
  elseif blocked > 0 then
    s = s .. string.format(" (%d of them need a session, and open failed)", blocked)
  end
  return s
end

-- The results of a report by name: {["group: name"] = result}.
function conformance.by_name(report)
  local t = {}
  for _, r in ipairs(report.results) do t[r.group .. ": " .. r.name] = r end
  return t
end

conformance.wire = wire

return conformance
