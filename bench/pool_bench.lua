-- Pools of providers placed by Slurm (prints figures; not a timed test).
--
--   smolwf bench/pool_bench.lua [STEPS] [ROUNDS] [PROFILE] [MOVE_BYTES]
--   (300 steps, 5 rounds, local/default, 1 GiB)
--
-- Needs a Slurm cluster: the one SLURM_CONF names, else a throwaway one
-- on this machine (.ci/slurm-up, as root), stopped at the end.
--
-- 1. Dispatch: STEPS steps each running `true`, on one local provider
--    and on a pool of 3 Slurm-placed providers (2 slots each; jobs 6 both),
--    in alternating rounds; the time from the run's start (the pool
--    already serving) to its end, per step, median of the rounds, and the
--    ratio (goal: within 1.2x). The Slurm commands run meanwhile are
--    counted (goal: none) and those of a whole pooled run, start included.
-- 2. Start-up: sandbox.pool{slurm = {nodes = 3}} until every provider
--    serves (salloc, 3 sruns, a `describe` each), against one `srun
--    hostname` (an allocation and one step), medians.
-- 3. Moving a 1 GiB output between two Slurm-placed providers through the
--    pool's file mover (sandbox.copy, where sessions announce the archive
--    extension), against tar c | tar x through a pipe and against what
--    srun's stdio forwarding carries by itself (the transport's ceiling).
local core = require "smol.core"
local task = require "smol.task"
local wf = require "smol.workflow"
local sandbox = require "smol.sandbox"
local slurm = require "smol.slurm"
local fs = require "smol.fs"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local STEPS = tonumber(arg[1] or "") or 300
local ROUNDS = tonumber(arg[2] or "") or 5
local PROFILE = arg[3] or "local/default"
local MOVE_BYTES = tonumber(arg[4] or "") or 1024 ^ 3

--[[ A cluster ]]

local function run_cmd(argv)
  local out, done = {}, task.event()
  local p = assert(core.spawn{file = argv[1], args = argv, stdout = "chunks", stderr = "chunks",
    on_stdout = function(d) if d then out[#out + 1] = d end end,
    on_stderr = function(d) if d then out[#out + 1] = d end end,
    on_exit = function(code) done:set(code) end})
  local code = done:wait()
  p:close()
  return code, table.concat(out)
end

-- Without a cluster: starts one, runs this script again with SLURM_CONF
-- naming it, and stops it.
if not os.getenv("SLURM_CONF") then
  local dir = fs.temp_dir("smolwf-pool-bench")
  local link = dir .. "/cluster"
  local code, out = run_cmd{"env", "SMOLWF_SLURM_OWNER=" .. core.getpid(), "bash", ".ci/slurm-up", link}
  assert(code == 0, "cannot start a test cluster (.ci/slurm-up needs root): " .. out)
  local argv = {"env", "SLURM_CONF=" .. link .. "/slurm.conf", core.exe_path(), "bench/pool_bench.lua",
    tostring(STEPS), tostring(ROUNDS), PROFILE, tostring(math.tointeger(MOVE_BYTES))}
  local done = task.event()
  local p = assert(core.spawn{file = argv[1], args = argv, stdout = "inherit", stderr = "inherit",
    on_exit = function(c) done:set(c) end})
  code = done:wait()
  p:close()
  run_cmd{"bash", ".ci/slurm-down", link}
  fs.remove_tree(dir)
  os.exit(code)
end

--[[ Figures ]]

local function figure(label, value, unit)
  io.write(("  %-58s %10.3f %s\n"):format(label, value, unit))
  io.flush()
end

local function calls_since(before)
  local parts = {}
  for name, n in pairs(slurm.calls()) do
    if n ~= (before[name] or 0) then parts[#parts + 1] = ("%s %d"):format(name, n - (before[name] or 0)) end
  end
  table.sort(parts)
  return #parts == 0 and "none" or table.concat(parts, ", ")
end

--[[ 1. Dispatch ]]

local function noop_workflow(sandbox_spec)
  local steps = {}
  for i = 1, STEPS do steps[i] = {name = "s" .. i, run = function(ctx) ctx:exec{"true"} end} end
  return wf.define{name = "dispatch", sandbox = sandbox_spec, jobs = 6, steps = steps}
end

-- Seconds from run_started to run_finished, and the Slurm calls between them.
local function timed_run(def)
  local dir = fs.temp_dir("smolwf-pool-bench-run")
  local t0, t1, before, during
  local watch = {
    run_started = function() t0, before = core.now(), slurm.calls() end,
    run_finished = function() t1, during = core.now(), calls_since(before) end,
  }
  local whole = slurm.calls()
  local run = wf.run(def, {report_dir = dir, reports = false, cache = false, observers = {watch}})
  fs.remove_tree(dir)
  assert(run.result == "success", "bench run failed")
  return t1 - t0, during, calls_since(whole)
end

local function dispatch()
  print(("1. dispatch: %d steps running `true` (%s), jobs 6, %d rounds"):format(STEPS, PROFILE, ROUNDS))
  local provider = core.bundled_provider()
  local local_def = noop_workflow({profile = PROFILE, workspace = ""})
  local launchers_def = noop_workflow({profile = PROFILE, workspace = "",
    pool = {programs = {provider, provider, provider}, slots = 2}})
  local pool_def = noop_workflow({profile = PROFILE, workspace = "", pool = {slurm = {nodes = 3}}})
  timed_run(local_def)   -- warm: the provider started, the files cached
  local local_t, launchers_t, pool_t, during, whole = {}, {}, {}, nil, nil
  for _ = 1, ROUNDS do
    local_t[#local_t + 1] = timed_run(local_def) / STEPS
    launchers_t[#launchers_t + 1] = timed_run(launchers_def) / STEPS
    local t
    t, during, whole = timed_run(pool_def)
    pool_t[#pool_t + 1] = t / STEPS
  end
  local l, m, p = median(local_t), median(launchers_t), median(pool_t)
  figure("per step, one local provider", l * 1000, "ms")
  figure("per step, pool of 3 local providers (the engine's share)", m * 1000, "ms")
  figure("per step, pool of 3 Slurm-placed providers", p * 1000, "ms")
  figure("ratio pool of local providers / one local", m / l, "x")
  figure("ratio Slurm pool / one local (goal <= 1.2)", p / l, "x")
  print("  Slurm commands while the steps ran: " .. during)
  print("  Slurm commands of a whole pooled run (start and end): " .. whole)
end

--[[ 2. Start-up ]]

local function startup()
  print(("2. start-up: a pool on 3 nodes until every provider serves, %d rounds"):format(ROUNDS))
  local pool_t, srun_t = {}, {}
  for _ = 1, ROUNDS do
    local t0 = core.now()
    local pool = sandbox.pool{slurm = {nodes = 3}}
    pool_t[#pool_t + 1] = core.now() - t0
    pool:close()
    t0 = core.now()
    local code, out = run_cmd{"srun", "-N1", "hostname"}
    srun_t[#srun_t + 1] = core.now() - t0
    assert(code == 0, "srun hostname failed: " .. out)
  end
  local p, s = median(pool_t), median(srun_t)
  figure("sandbox.pool{slurm = {nodes = 3}} serving", p * 1000, "ms")
  figure("srun -N1 hostname", s * 1000, "ms")
  figure("ratio", p / s, "x")
end

--[[ 3. Moving outputs ]]

local function moving()
  print(("3. moving a %.0f MiB output between two providers of a pool"):format(MOVE_BYTES / 1024 ^ 2))
  local pool = sandbox.pool{slurm = {nodes = 2}}
  local a = pool:open_on(pool:member(1), {profile = PROFILE, workspace = ""})
  local b = pool:open_on(pool:member(2), {profile = PROFILE, workspace = ""})
  if not (a.capabilities.archive and sandbox.copy) then
    print("  skipped: the sessions do not announce the archive extension")
    pool:close()
    return
  end
  local r = a:exec{"sh", "-c", "mkdir out && head -c " .. math.tointeger(MOVE_BYTES) .. " /dev/urandom > out/blob"}
  assert(r.exit_code == 0, r.stderr)
  local times = {}
  for i = 1, math.min(ROUNDS, 3) do
    if i > 1 then b:remove("out") end
    local t0 = core.now()
    local moved = require("smol.pool.files").move(a, {"out"}, b)
    times[#times + 1] = core.now() - t0
    assert(moved.via == "archive")
  end
  figure("smol.pool.files.move (sandbox.copy)", MOVE_BYTES / 1024 ^ 2 / median(times), "MiB/s")
  pool:close()
  local mib, count = MOVE_BYTES / 1024 ^ 2, math.tointeger(MOVE_BYTES // (1024 * 1024))
  local dir = fs.temp_dir("smolwf-pool-bench-tar")
  run_cmd{"sh", "-c", ("mkdir %s/src %s/dst && head -c %d /dev/urandom > %s/src/blob"):format(dir, dir,
    math.tointeger(MOVE_BYTES), dir)}
  local t0 = core.now()
  run_cmd{"sh", "-c", ("tar -C %s/src -c . | tar -C %s/dst -x"):format(dir, dir)}
  figure("tar c | tar x through a pipe, on this machine", mib / (core.now() - t0), "MiB/s")
  fs.remove_tree(dir)
  -- what srun's own stdio forwarding carries, the pool's transport
  t0 = core.now()
  local code, out = run_cmd{"sh", "-c", ("srun -N1 -n1 -u dd if=/dev/zero bs=1M count=%d status=none | cat > /dev/null")
    :format(count)}
  assert(code == 0, out)
  figure("srun -u's stdout forwarding alone (dd | srun | cat)", mib / (core.now() - t0), "MiB/s")
end

dispatch()
startup()
moving()
