-- `smolwf provider-check [OPTIONS] [-- PROGRAM [ARGS...]]`: runs the
-- provider conformance suite (smol.provider.conformance) against a provider
-- executable and prints one line per check, then "N passed, M failed".
local M = {}

M.USAGE = [==[
usage: smolwf provider-check [OPTIONS] [--] [PROGRAM [ARGS...]]

Runs the sandbox provider conformance suite against PROGRAM, started as
`PROGRAM ARGS... serve` (default: the bundled smolwf-provider). Prints one
line per check (PASS, FAIL with what was expected and what came back, or
SKIP for an extension the session does not announce), then a summary line
"N passed, M failed, K skipped". When PROGRAM cannot open a session with
the profile, that is one FAIL line with its reply, and the checks that need
a session are skipped (counted in the summary).

options:
  --profile P       the profile sent with open, PROVIDER/NAME
                    (default auto/default)
  --open-timeout S  seconds the first open may take (default 10)
  --group NAME      run only this group of checks (repeatable)
  --list            list the groups and their checks, then exit
  -q, --quiet       print only failed checks and the summary
  -v, --verbose     also pass the provider's stderr through, prefixed
  --help            this text

exit status: 0 every check passed, 1 a check failed, 2 usage error or a
PROGRAM that cannot start, 130 interrupted (Ctrl-C).
]==]

-- One line: what was wrong, and where to read more.
local function usage_error(message)
  io.stderr:write("smolwf provider-check: ", message, " (see smolwf provider-check --help)\n")
  return nil
end

local FLAGS = {["-q"] = "quiet", ["--quiet"] = "quiet", ["-v"] = "verbose",
  ["--verbose"] = "verbose", ["--list"] = "list", ["-h"] = "help", ["--help"] = "help"}

local VALUED = {["--profile"] = true, ["--group"] = true, ["--open-timeout"] = true}

-- Stores a valued option; false after printing why its value is wrong.
local function add_valued(opts, name, value)
  if name == "--profile" then opts.profile = value
  elseif name == "--group" then opts.groups = opts.groups or {}; opts.groups[#opts.groups + 1] = value
  else
    local seconds = tonumber(value)
    if not seconds or seconds <= 0 then
      usage_error("--open-timeout needs a positive number of seconds, got '" .. value .. "'")
      return false
    end
    opts.open_timeout = seconds
  end
  return true
end

-- Takes the value of an option (`--opt VALUE` or `--opt=VALUE`); returns it and the next index.
local function option_value(args, i, inline)
  if inline then return inline, i + 1 end
  return args[i + 1], i + 2
end

--- Parses args; returns opts ({profile, groups, quiet, verbose, list, help,
--- program, args}) or nil after printing what was wrong.
function M.parse(args)
  local opts, i = {groups = nil, args = {}}, 1
  while i <= #args do
    local a = args[i]
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    name = name or a
    if a == "--" then i = i + 1; break
    elseif FLAGS[a] then opts[FLAGS[a]] = true; i = i + 1
    elseif VALUED[name] then
      local value
      value, i = option_value(args, i, inline)
      if not value or value == "" then return usage_error(name .. " needs a value") end
      if not add_valued(opts, name, value) then return nil end
    elseif a:sub(1, 1) == "-" then return usage_error("unknown option '" .. a .. "'")
    else break end
  end
  opts.program = args[i]
  for j = i + 1, #args do opts.args[#opts.args + 1] = args[j] end
  return opts
end

local function list_groups(conformance)
  for _, group in ipairs(conformance.groups()) do
    local needs = group.needs and (" (needs `" .. group.needs .. "`)") or ""
    print(group.name .. needs)
    for _, check in ipairs(group.checks) do print("  " .. check[1]) end
  end
  return 0
end

-- nil when every wanted group exists, else a message naming the first
-- unknown one and the groups there are.
local function unknown_group(conformance, wanted)
  local names, known = {}, {}
  for _, group in ipairs(conformance.groups()) do
    names[group.name] = true
    known[#known + 1] = group.name
  end
  for _, name in ipairs(wanted or {}) do
    if not names[name] then
      return ("unknown group `%s` (the groups: %s)"):format(name, table.concat(known, ", "))
    end
  end
end

local function run(conformance, opts)
  local ok, report = pcall(conformance.run, {
    program = opts.program, args = opts.args, profile = opts.profile, groups = opts.groups,
    open_timeout = opts.open_timeout,
    on_result = function(r)
      -- a check skipped because open failed: the FAIL for open and the summary say it once
      if r.blocked then return end
      if not opts.quiet or r.status == "fail" then
        io.stdout:write(conformance.format(r), "\n")
        io.stdout:flush()
      end
    end,
    stderr_sink = opts.verbose and function(line)
      io.stderr:write("provider-check: [provider] ", line, "\n")
    end or nil,
  })
  if not ok then
    if type(report) == "table" then error(report, 0) end   -- Ctrl-C: the host exits 130
    io.stderr:write("smolwf provider-check: ", tostring(report), "\n")
    return 2
  end
  io.stdout:write(conformance.summary(report), "\n")
  return report.failed == 0 and 0 or 1
end

function M.main(args)
  local opts = M.parse(args)
  if not opts then return 2 end
  if opts.help then io.stdout:write(M.USAGE); return 0 end
  local conformance = require "smol.provider.conformance"
  if opts.list then return list_groups(conformance) end
  local bad = unknown_group(conformance, opts.groups)
  if bad then usage_error(bad); return 2 end
  if not opts.program then
    opts.program = require("smol.core").bundled_provider()
    if not opts.program then usage_error("no PROGRAM and no bundled provider"); return 2 end
  end
  if opts.profile and not opts.profile:match("^[^/]+/[^/]+$") then
    usage_error("--profile must look like PROVIDER/NAME, got `" .. opts.profile .. "`")
    return 2
  end
  return run(conformance, opts)
end

return setmetatable(M, {__call = function(_, args) return M.main(args) end})
