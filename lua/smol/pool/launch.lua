--[[
smol.pool.launch: the providers of a pool, from its options, started and
serving.

  local members, alloc = launch.start(opts, level)

opts.programs = {ARGV, ...}: one provider per launcher argv (a path or an
argv list; `serve` is appended), each entry optionally with `slots = N`
and `node = "NAME"`. opts.slurm = {nodes, partition, time, cpus_per_node,
args, job, grant_timeout, program, srun_args}: one provider per node of a
Slurm allocation (smol.slurm), each a job step `srun ... PROGRAM serve`.
A member is {index, node, slots, label, program, conn, stderr_tail}.

Every provider is started at once, then asked `describe` (any answer, an
error reply included, proves it serves); a member that does not serve
within opts.start_timeout makes the whole start fail, naming it, after
everything started is stopped (and an allocation made here released).
A launcher member without `slots` or `node` is asked once, in a probe
session with an empty workspace, for its CPU count and host name.
]]

local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local jsonl = require "smol.jsonl"

local launch = {
  start_timeout = 120,   -- seconds every provider gets to serve (sruns may wait for their nodes)
  stop_grace = 5,        -- seconds each provider gets to exit after `shutdown`
}

local STDERR_TAIL = 10

-- Members being started (not yet handed to their pool): an interrupt then
-- stops them through launch.stop_starting.
local starting = {}   -- last stderr lines of a provider kept for the messages that name it

local SLURM_KEYS = {nodes = true, partition = true, time = true, cpus_per_node = true, args = true,
  job = true, grant_timeout = true, job_name = true, program = true, srun_args = true}
local POOL_KEYS = {programs = true, slurm = true, slots = true, start_timeout = true, profile = true}

--[[ Options ]]

local function bad(level, fmt, ...)
  error("sandbox.pool: " .. fmt:format(...), level + 1)
end

local function check_slots(v, what, level)
  if v ~= nil and (math.type(v) ~= "integer" or v < 1) then
    bad(level + 1, "%s must be a positive integer", what)
  end
end

local function check_argv(entry, i, level)
  if type(entry) == "string" then return {entry} end
  if type(entry) ~= "table" or type(entry[1]) ~= "string" then
    bad(level + 1, "programs[%d] must be a path or an argv list", i)
  end
  for k, v in pairs(entry) do
    if math.type(k) == "integer" then
      if type(v) ~= "string" then bad(level + 1, "programs[%d][%d] must be a string", i, k) end
    elseif k ~= "slots" and k ~= "node" then
      bad(level + 1, "programs[%d] has an unknown field %q (known: slots, node)", i, tostring(k))
    end
  end
  check_slots(entry.slots, ("programs[%d].slots"):format(i), level + 1)
  if entry.node ~= nil and type(entry.node) ~= "string" then bad(level + 1, "programs[%d].node must be a string", i) end
  return table.move(entry, 1, #entry, 1, {})
end

local function check_slurm(s, level)
  if type(s) ~= "table" then bad(level + 1, "option slurm must be a table") end
  for k in pairs(s) do
    if not SLURM_KEYS[k] then bad(level + 1, "option slurm has an unknown field %q", tostring(k)) end
  end
  if s.program ~= nil then jsonl.argv(s.program, level + 1) end
  if s.srun_args ~= nil and type(s.srun_args) ~= "table" then
    bad(level + 1, "option slurm.srun_args must be a list of strings")
  end
end

-- Checks the pool's options; raises argument errors `level` frames up.
function launch.check(opts, level)
  level = level + 1
  if type(opts) ~= "table" then bad(level, "expected a table of options") end
  for k in pairs(opts) do
    if not POOL_KEYS[k] then
      bad(level, "unknown option %q (known: programs, slurm, slots, start_timeout, profile)", tostring(k))
    end
  end
  if (opts.programs == nil) == (opts.slurm == nil) then bad(level, "give exactly one of programs and slurm") end
  check_slots(opts.slots, "option slots", level)
  local t = opts.start_timeout
  if t ~= nil and (type(t) ~= "number" or not (t > 0)) then
    bad(level, "option start_timeout must be a positive number of seconds")
  end
  if opts.programs ~= nil then
    if type(opts.programs) ~= "table" or opts.programs[1] == nil then
      bad(level, "option programs must be a non-empty list of programs")
    end
    for i, entry in ipairs(opts.programs) do check_argv(entry, i, level) end
  else
    check_slurm(opts.slurm, level)
  end
end

--[[ Members ]]

local function default_program()
  local program = os.getenv("SMOLWF_PROVIDER")
  if program and program ~= "" then return program end
  return core.bundled_provider() or "smolwf-provider"
end

-- What each member will run, before anything starts.
local function plan_programs(opts)
  local plan = {}
  for i, entry in ipairs(opts.programs) do
    local argv = type(entry) == "string" and {entry} or table.move(entry, 1, #entry, 1, {})
    plan[i] = {argv = argv, slots = opts.slots or (type(entry) == "table" and entry.slots) or nil,
      node = type(entry) == "table" and entry.node or nil}
  end
  return plan
end

local function plan_slurm(opts, alloc)
  local s, plan = opts.slurm, {}
  local program = s.program or default_program()
  for i, node in ipairs(alloc.nodes) do
    plan[i] = {argv = alloc:srun_argv(node, program, s.srun_args), node = node,
      slots = opts.slots or alloc.cpus[node]}
  end
  return plan
end

-- A provider's stderr: its last lines are kept for the messages naming
-- it, and each line goes to ours, prefixed with the member it came from.
local function stderr_keeper(member)
  return function(line)
    local tail = member.stderr_tail
    tail[#tail + 1] = line
    if #tail > STDERR_TAIL then table.remove(tail, 1) end
    io.stderr:write("[provider ", member.index, member.node and (" " .. member.node) or "", "] ", line, "\n")
  end
end

-- "provider 2 (n2)", or "provider 2 (ssh box smolwf-provider)".
function launch.name(member)
  return ("provider %d (%s)"):format(member.index, member.node or member.label)
end

-- The member's last stderr lines, as a message suffix ("" when none).
function launch.stderr_note(member)
  if #member.stderr_tail == 0 then return "" end
  return "; its last stderr lines: " .. table.concat(member.stderr_tail, " | ")
end

local function start_member(index, item)
  local member = {index = index, node = item.node, slots = item.slots, program = item.argv, stderr_tail = {}}
  member.label = jsonl.label(item.argv)
  member.conn = jsonl.start(item.argv, {on_stderr = stderr_keeper(member)})
  starting[member] = true
  return member
end

--[[ Serving ]]

-- Waits until the member answers `describe`; returns its profiles (or
-- {} for a provider without describe). Raises naming the member otherwise.
local function await_serving(member, seconds)
  local ok, r = pcall(member.conn.request, member.conn, "describe", {}, nil, {timeout = seconds})
  if ok then return type(r) == "table" and type(r.profiles) == "table" and r.profiles or {} end
  local code = type(r) == "table" and r.code
  if code ~= "provider_exited" and code ~= "timeout" and code ~= "protocol" and code ~= "io_error" then
    return {}   -- an error reply: it serves, without describe
  end
  errors.raise{code = code, program = member.program,
    message = ("%s did not start serving: %s%s"):format(launch.name(member),
      type(r) == "table" and tostring(r.message) or tostring(r),
      -- an error that ended the provider quotes its stderr already (smol.jsonl)
      (type(r) == "table" and r.stderr) and "" or launch.stderr_note(member))}
end

local function has_profile(profiles, name)
  for _, p in ipairs(profiles) do
    if type(p) == "table" and p.name == name then return true end
  end
  return false
end

--[[
Asks a launcher member for its node's CPU count and host name, in a
session of its own with an empty workspace. local/default, where the
provider has it, sees the machine itself (a namespace's host name is the
sandbox's own); otherwise the pool's profile.
]]
local function probe(member, profiles, profile)
  local sandbox = require "smol.sandbox"
  local local_profile = has_profile(profiles, "local/default")
  local sb = sandbox.open{connection = member.conn, profile = local_profile and "local/default" or profile}
  local ok, r = pcall(sb.exec, sb, {"sh", "-c", "getconf _NPROCESSORS_ONLN; uname -n"})
  pcall(sb.close, sb)
  if not ok then error(r, 0) end
  local cpus, host = r.stdout:match("^(%d+)\n([^\n]+)")
  if r.exit_code ~= 0 or not cpus then
    errors.raise{code = "protocol", program = member.program,
      message = ("%s: cannot tell its CPU count (`getconf _NPROCESSORS_ONLN; uname -n` said %q): give it slots ="):format(
        launch.name(member), r.stdout .. r.stderr)}
  end
  member.slots = member.slots or tonumber(cpus)
  if not member.node and (local_profile or sb.capabilities.isolation == "none") then member.node = host end
end

local function serve(member, seconds, profile)
  local profiles = await_serving(member, seconds)
  member.serving = true
  if not member.slots or not member.node then probe(member, profiles, profile) end
end

--[[ Starting and stopping ]]

-- Stops a member that never served: TERM (KILL after the connection's
-- grace), and waits until it has exited.
local function give_up(m)
  local conn = m.conn
  conn:give_up(errors.new{code = "cancelled", message = launch.name(m) .. " was stopped before it served"},
    "was stopped before it served")
  conn:wait_exit()
end

-- Stops members (concurrently): `shutdown`, then KILL after the grace.
function launch.stop(members)
  local fns = {}
  for _, m in ipairs(members) do
    fns[#fns + 1] = function()
      if m.serving then m.conn:shutdown(launch.stop_grace) else give_up(m) end
    end
  end
  if #fns > 0 then task.all(fns) end
end

local function start_all(plan, opts)
  local members = {}
  local ok, err = pcall(function()
    for i, item in ipairs(plan) do members[i] = start_member(i, item) end
    local fns = {}
    for _, m in ipairs(members) do
      fns[#fns + 1] = function() serve(m, opts.start_timeout or launch.start_timeout, opts.profile) end
    end
    task.all(fns)
  end)
  if not ok then launch.stop(members) end
  for _, m in ipairs(members) do starting[m] = nil end
  if not ok then error(err, 0) end
  return members
end

-- At the end of the run: stops the members still being started.
function launch.stop_starting()
  local list = {}
  for m in pairs(starting) do list[#list + 1] = m end
  starting = {}
  launch.stop(list)
end

-- Starts the pool's members; returns them and the Slurm allocation (or nil).
function launch.start(opts)
  if opts.programs then return start_all(plan_programs(opts), opts), nil end
  local slurm = require "smol.slurm"
  local s = opts.slurm
  local replay = package.loaded["smol.recording.replay"]
  local recording = replay and replay.installed()
  -- A replay runs nothing: its nodes are the recorded run's, no salloc.
  local alloc = recording and replay.slurm_allocation(recording) or slurm.allocation{nodes = s.nodes,
    partition = s.partition, time = s.time, cpus_per_node = s.cpus_per_node, args = s.args, job = s.job,
    grant_timeout = s.grant_timeout, job_name = s.job_name}
  local ok, members = pcall(function() return start_all(plan_slurm(opts, alloc), opts) end)
  if ok then return members, alloc end
  pcall(alloc.release, alloc)
  error(members, 0)
end

return launch
