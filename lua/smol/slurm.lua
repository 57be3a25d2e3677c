--[[
smol.slurm: placing long-lived providers on the nodes of a Slurm allocation.

  local alloc = slurm.allocation{nodes =, partition =, time =, cpus_per_node =,
                                 args =, job_name =, grant_timeout =, job =}
  alloc.job_id, alloc.made, alloc.nodes ({"n1", ...}), alloc.cpus ({n1 = 2, ...})
  alloc:srun_argv(node, program, srun_args) -> {"srun", "--jobid=J", ..., program...}
  alloc:release()             scancel an allocation we made (idempotent)
  slurm.calls()               Slurm commands run so far, by name

An allocation is the one this host runs in (SLURM_JOB_ID set: started by
salloc or sbatch; opts.job names another), or one made here with
`salloc --no-shell`, which returns once the scheduler granted it. Inside an
existing allocation the salloc options are not used; `nodes` takes its
first N nodes. An allocation made here is released (scancel, then waited
for until squeue no longer lists it) by alloc:release() and at the end of
the run, normal or not (Ctrl-C, SIGTERM: smol.task's exit hooks).

The per-node argv starts one job step that stays up as long as the
provider it runs: `-u` (no buffering of its JSON lines), no `--pty` (a
terminal would alter them), `--kill-on-bad-exit`, and every CPU the
allocation has on that node (a step holding one CPU would have its
commands confined to that one CPU where the site binds tasks to CPUs).
Nothing here runs per workflow step: slurm.calls() counts every salloc,
scontrol, scancel and squeue run, and every srun argv built (one step
each), so a benchmark can show that steps cost the controller nothing.

Failures of the Slurm commands raise smol.errors values with code "slurm"
(or "not_found" when a command is not installed) naming the command and
what it printed; misuse raises argument errors.
]]

local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local lists = require "smol.slurm.lists"

local slurm = {
  release_wait = 10,   -- seconds release waits for squeue to drop the job
  exit_grace = 5,      -- seconds a salloc still waiting at exit gets after TERM
}

local calls = {salloc = 0, scontrol = 0, scancel = 0, squeue = 0, srun = 0}
local held = {}        -- allocations made here and not released yet
local waiting = {}     -- salloc processes still running -> their allocation
local exit_hook_registered = false

local Allocation = {}
Allocation.__index = Allocation
Allocation.__name = "smol.slurm.allocation"

--[[ Running Slurm commands ]]

function slurm.calls()
  local copy = {}
  for k, v in pairs(calls) do copy[k] = v end
  return copy
end

local function command_text(argv)
  return table.concat(argv, " ")
end

local function fail(argv, message)
  errors.raise{code = "slurm", command = argv, message = ("`%s` %s"):format(command_text(argv), message)}
end

-- What a Slurm command printed on stderr, without its "salloc: error: " prefixes.
local function tidy_stderr(lines, name)
  local out = {}
  for _, line in ipairs(lines) do
    line = line:gsub("^" .. name .. ": ", ""):gsub("^error: ", "")
    if line ~= "" then out[#out + 1] = line end
  end
  return table.concat(out, "; ")
end

--[[
Runs a Slurm command to its end; returns its stdout, or raises when it
could not start or exited non-zero (unless opts.may_fail: then also the
exit code and stderr). opts.on_stderr(line) sees each stderr line as it
comes; opts.track (an allocation) keeps the process in `waiting` while it
runs, for the exit hook to end it. The command leads its own process group: a
terminal's Ctrl-C reaches only the host, whose exit hooks end it in order.
]]
local function run(argv, opts)
  opts = opts or {}
  local name = argv[1]
  calls[name] = (calls[name] or 0) + 1
  local out, err, done = {}, {}, task.event()
  local proc, msg, errname   -- declared first: on_exit refers to proc
  proc, msg, errname = core.spawn{
    file = name, args = argv, process_group = true, stdout = "chunks", stderr = "lines",
    on_stdout = function(data) if data then out[#out + 1] = data end end,
    on_stderr = function(line)
      if not line then return end
      err[#err + 1] = line
      if opts.on_stderr then opts.on_stderr(line) end
    end,
    on_exit = function(code, signal)
      waiting[proc] = nil
      done:set(code, signal)
    end,
  }
  if not proc then
    errors.raise{code = errname == "ENOENT" and "not_found" or "slurm", command = argv, path = name,
      message = ("cannot run `%s` (is Slurm installed?): %s"):format(name, tostring(msg))}
  end
  if opts.track then waiting[proc] = opts.track end
  local code, signal = done:wait()
  proc:close()
  local stderr = tidy_stderr(err, name)
  if code ~= 0 and not opts.may_fail then
    fail(argv, ("failed with %s: %s"):format(signal and ("signal " .. signal) or ("status " .. code),
      stderr ~= "" and stderr or "(no message)"))
  end
  return table.concat(out), code, stderr
end

local function scontrol_hostnames(list)
  local names = {}
  for name in run{"scontrol", "show", "hostnames", list}:gmatch("%S+") do names[#names + 1] = name end
  return names
end

--[[ The end of the run ]]

-- A salloc still waiting for its grant: TERM makes it cancel its pending
-- job; KILL after slurm.exit_grace (its allocation, still held, cancels the
-- job id it printed).
local function stop_waiting_sallocs()
  local list = {}
  for proc in pairs(waiting) do list[#list + 1] = proc end
  for _, proc in ipairs(list) do
    proc:kill("TERM")
    local timer = core.timer(slurm.exit_grace, function() proc:kill("KILL") end)
    while waiting[proc] ~= nil do task.sleep(0.05) end   -- on_exit clears it
    timer:stop()
  end
end

local function release_all()
  stop_waiting_sallocs()
  local list = {}
  for alloc in pairs(held) do list[#list + 1] = alloc end
  for _, alloc in ipairs(list) do
    local ok, err = pcall(alloc.release, alloc)
    if not ok then io.stderr:write("smolwf: ", tostring(err), "\n") end
  end
end

local function register_exit_hook()
  if exit_hook_registered or not task.at_exit then return end
  exit_hook_registered = true
  task.at_exit(release_all)
end

-- Registers the hook that releases allocations at exit now (a user whose
-- own hook must run before it registers it after calling this: hooks run
-- latest first).
slurm.ensure_exit_hook = register_exit_hook

--[[ Options ]]

local function check_positive_integer(opts, key)
  local v = opts[key]
  if v ~= nil and (math.type(v) ~= "integer" or v < 1) then
    error(("slurm.allocation: option %s must be a positive integer"):format(key), 3)
  end
end

local function check_opts(opts)
  if type(opts) ~= "table" then error("slurm.allocation: expected a table of options", 3) end
  check_positive_integer(opts, "nodes")
  check_positive_integer(opts, "cpus_per_node")
  check_positive_integer(opts, "grant_timeout")
  for _, key in ipairs{"partition", "job_name"} do
    if opts[key] ~= nil and type(opts[key]) ~= "string" then
      error(("slurm.allocation: option %s must be a string"):format(key), 3)
    end
  end
  local t = opts.time
  if t ~= nil and type(t) ~= "string" and not (math.type(t) == "integer" and t > 0) then
    error("slurm.allocation: option time must be a Slurm time string or a number of minutes", 3)
  end
  if opts.args ~= nil then
    if type(opts.args) ~= "table" then error("slurm.allocation: option args must be a list of strings", 3) end
    for _, a in ipairs(opts.args) do
      if type(a) ~= "string" then error("slurm.allocation: option args must be a list of strings", 3) end
    end
  end
  local job = opts.job
  if job ~= nil and job ~= false and type(job) ~= "string" and math.type(job) ~= "integer" then
    error("slurm.allocation: option job must be a job id or false", 3)
  end
end

--[[
salloc's argv. Without cpus_per_node the nodes are taken whole
(--exclusive): the provider on a node then runs steps on all its CPUs.
]]
local function salloc_argv(opts)
  -- --no-kill: a node that fails ends only the job step on it (its
  -- provider), not the whole allocation, so the other nodes keep serving
  local argv = {"salloc", "--no-shell", "--nodes=" .. (opts.nodes or 1), "--ntasks-per-node=1",
    "--no-kill", "--job-name=" .. (opts.job_name or "smolwf")}
  if opts.cpus_per_node then
    argv[#argv + 1] = "--cpus-per-task=" .. opts.cpus_per_node
  else
    argv[#argv + 1] = "--exclusive"
  end
  if opts.partition then argv[#argv + 1] = "--partition=" .. opts.partition end
  if opts.time then argv[#argv + 1] = "--time=" .. tostring(opts.time) end
  if opts.grant_timeout then argv[#argv + 1] = "--immediate=" .. opts.grant_timeout end
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = a end
  return argv
end

--[[ Allocations ]]

local function new_allocation(job_id, made, nodes, cpus)
  return setmetatable({job_id = job_id and tostring(job_id), made = made, nodes = nodes, cpus = cpus,
    released = false}, Allocation)
end

-- The nodes and per-node CPU counts of job id, from `scontrol show job -d`.
local function describe_job(job_id)
  local argv = {"scontrol", "show", "job", "-d", tostring(job_id)}
  local text = run(argv)
  local state = text:match("JobState=(%S+)")
  -- CONFIGURING: granted, its nodes still booting (srun waits for them)
  if state ~= "RUNNING" and state ~= "CONFIGURING" then
    fail(argv, ("says job %s is %s, not RUNNING"):format(job_id, tostring(state)))
  end
  local nodes, cpus = {}, {}
  for list, ids in text:gmatch("\n%s+Nodes=(%S+) CPU_IDs=(%S+)") do
    local n = lists.count_ids(ids)
    for _, node in ipairs(scontrol_hostnames(list)) do
      nodes[#nodes + 1], cpus[node] = node, n
    end
  end
  if #nodes == 0 then fail(argv, "lists no nodes for job " .. job_id) end
  return nodes, cpus
end

-- The allocation this host runs in, from the variables salloc/sbatch set.
local function from_environment(job_id)
  local list = os.getenv("SLURM_JOB_NODELIST")
  local per_node = os.getenv("SLURM_JOB_CPUS_PER_NODE")
  if not list or not per_node then return describe_job(job_id) end
  local nodes = scontrol_hostnames(list)
  local counts = lists.expand_counts(per_node)
  if #counts ~= #nodes then
    errors.raise{code = "slurm", message = ("SLURM_JOB_CPUS_PER_NODE=%s does not match the %d nodes of %s")
      :format(per_node, #nodes, list)}
  end
  local cpus = {}
  for i, node in ipairs(nodes) do cpus[node] = counts[i] end
  return nodes, cpus
end

-- An existing allocation; opts.nodes takes its first N nodes.
local function existing(job_id, opts, env)
  local nodes, cpus
  if env then nodes, cpus = from_environment(job_id) else nodes, cpus = describe_job(job_id) end
  local want = opts.nodes
  if want and want > #nodes then
    errors.raise{code = "slurm", message = ("allocation %s has %d node(s), %d asked for")
      :format(job_id, #nodes, want)}
  end
  for i = #nodes, (want or #nodes) + 1, -1 do cpus[nodes[i]], nodes[i] = nil, nil end
  return new_allocation(job_id, false, nodes, cpus)
end

--[[
Makes an allocation with salloc, which returns once it is granted. It is
held (released at exit) before salloc starts, and gets its job id from
what salloc prints ("Pending job allocation N", "Granted job allocation
N") as it prints it: a run interrupted at any point still cancels it.
]]
local function make(opts)
  register_exit_hook()
  local argv = salloc_argv(opts)
  local alloc = new_allocation(nil, true, {}, {})
  held[alloc] = true
  local ok, err = pcall(function()
    local _, code, stderr = run(argv, {may_fail = true, track = alloc, on_stderr = function(line)
      alloc.job_id = alloc.job_id or line:match("job allocation (%d+)")
    end})
    if code ~= 0 or not alloc.job_id then
      fail(argv, ("failed with status %d: %s"):format(code, stderr ~= "" and stderr or "(no message)"))
    end
    alloc.nodes, alloc.cpus = describe_job(alloc.job_id)
  end)
  if not ok then
    alloc:release()
    error(err, 0)
  end
  return alloc
end

function slurm.allocation(opts)
  opts = opts or {}
  check_opts(opts)
  local job = opts.job
  if job == nil then
    local env_job = os.getenv("SLURM_JOB_ID")
    if env_job and env_job ~= "" then return existing(env_job, opts, true) end
  elseif job ~= false then
    return existing(tostring(job), opts, false)
  end
  return make(opts)
end

-- An allocation as a recording has it (smol.recording.replay): its job, nodes
-- and CPUs; no Slurm command runs for it, and release leaves it alone.
function slurm.recorded(job_id, nodes, cpus)
  return new_allocation(job_id, false, nodes, cpus)
end

--[[ Using an allocation ]]

--[[
The argv of one job step running program (a path or an argv list; `serve`
is for the caller to append) on node: one task, the node's CPUs, output
unbuffered, no terminal. srun_args go before the program.
]]
function Allocation:srun_argv(node, program, srun_args)
  if getmetatable(self) ~= Allocation then error("slurm: srun_argv: expected an allocation", 2) end
  local cpus = self.cpus[node]
  if not cpus then
    error(("slurm: srun_argv: %s is not a node of allocation %s"):format(tostring(node), self.job_id), 2)
  end
  if type(program) == "string" then program = {program} end
  if type(program) ~= "table" or type(program[1]) ~= "string" then
    error("slurm: srun_argv: program must be a path or an argv list", 2)
  end
  local argv = {"srun", "--jobid=" .. self.job_id, "--nodes=1", "--ntasks=1", "--nodelist=" .. node,
    "--cpus-per-task=" .. cpus, "--unbuffered", "--kill-on-bad-exit=1", "--mpi=none"}
  for _, a in ipairs(srun_args or {}) do argv[#argv + 1] = a end
  for _, a in ipairs(program) do argv[#argv + 1] = a end
  calls.srun = calls.srun + 1
  return argv
end

-- True when squeue no longer lists the job (ended, or already forgotten).
local function left_queue(job_id)
  local argv = {"squeue", "--noheader", "--jobs=" .. job_id, "--format=%T"}
  local out, code, stderr = run(argv, {may_fail = true})
  if code == 0 then return out:match("%S") == nil end
  if stderr:match("Invalid job id") then return true end
  fail(argv, ("failed with status %d: %s"):format(code, stderr))
end

--[[
Releases an allocation made here: scancel, then waits (at most
slurm.release_wait seconds) until squeue no longer lists it, so nothing of
ours is left when the run ends. One this host did not make is left alone.
]]
function Allocation:release()
  if getmetatable(self) ~= Allocation then error("slurm: release: expected an allocation", 2) end
  if self.released or not self.made then return end
  self.released = true
  held[self] = nil
  if not self.job_id then return end   -- salloc failed before it made a job
  run{"scancel", self.job_id}
  local deadline, pause = core.now() + slurm.release_wait, 0.05
  while not left_queue(self.job_id) do
    if core.now() > deadline then
      errors.raise{code = "timeout", message = ("job %s still in squeue %g s after scancel")
        :format(self.job_id, slurm.release_wait)}
    end
    task.sleep(pause)
    pause = math.min(pause * 2, 1)
  end
end

function Allocation:__tostring()
  return ("slurm allocation %s (%s%s)"):format(self.job_id, table.concat(self.nodes, ","),
    self.made and (self.released and ", released" or ", made here") or "")
end

slurm.Allocation = Allocation
return slurm
