-- Workflow engine benchmark (prints figures; not a timed test).
--
--   smolwf bench/workflow_bench.lua [PROFILE]      (default profile local/default)
--
-- 1. Scheduling 1,000 no-op steps (pure Lua, no sandbox): flat, and as one
--    chain. Target < 1 s.
-- 2. 200 steps each running `true` through the provider with jobs = 8,
--    side by side with 200 raw `exec` calls from 8 tasks on one session.
--    Target: engine / raw <= 1.15x.
local wf = require "smol.workflow"
local task = require "smol.task"
local core = require "smol.core"
local sandbox = require "smol.sandbox"

local PROFILE = arg[1] or "local/default"
local ROUNDS = 3

local function temp_report_dir()
  return assert(core.mkdtemp("/tmp/smolwf-bench-XXXXXX"))
end

local function rm_rf(path)
  os.execute("rm -rf '" .. path:gsub("'", "'\\''") .. "'")
end

local function timed(fn)
  local t0 = core.now()
  fn()
  return core.now() - t0
end

local function best_of(n, fn)
  local best = math.huge
  for _ = 1, n do best = math.min(best, timed(fn)) end
  return best
end

local function run_quietly(def, opts)
  local dir = temp_report_dir()
  opts.report_dir, opts.reports = dir, false
  local run = wf.run(wf.define(def), opts)
  rm_rf(dir)
  assert(run.result == "success", "bench run failed: " .. tostring(run.result))
  return run
end

local function noop_steps(n, chained)
  local steps = {}
  for i = 1, n do
    steps[i] = { name = "s" .. i, run = function() end,
      needs = (chained and i > 1) and { "s" .. (i - 1) } or nil }
  end
  return { name = "noop", steps = steps }
end

local function bench_scheduling()
  for _, chained in ipairs { false, true } do
    local t = best_of(ROUNDS, function()
      run_quietly(noop_steps(1000, chained), { jobs = 8 })
    end)
    print(("schedule 1000 no-op steps (%s): %.3f s  (target < 1 s)")
      :format(chained and "one chain" or "independent", t))
  end
end

local function exec_steps(n)
  local steps = {}
  for i = 1, n do
    steps[i] = { name = "t" .. i, run = function(ctx) ctx:exec { "true" } end }
  end
  return { name = "exec", sandbox = { profile = PROFILE }, steps = steps }
end

-- 200 execs from 8 tasks on one session: what the engine is compared with.
local function raw_execs(n, workers)
  local sb = sandbox.open { profile = PROFILE }
  local next_i = 0
  local fns = {}
  for w = 1, workers do
    fns[w] = function()
      while next_i < n do
        next_i = next_i + 1
        sb:exec { "true" }
      end
    end
  end
  local t = timed(function() task.all(fns) end)
  sb:close()
  return t
end

local function bench_exec()
  local n, jobs = 200, 8
  -- Warm up the provider (process start, first session) outside the timings.
  raw_execs(8, jobs)
  local raw, engine = math.huge, math.huge
  for _ = 1, ROUNDS do
    raw = math.min(raw, raw_execs(n, jobs))
    -- The engine's time includes opening and closing its session, as the raw one does.
    engine = math.min(engine, timed(function() run_quietly(exec_steps(n), { jobs = jobs }) end))
  end
  print(("%d x exec `true` (%s), 8 at a time: raw %.3f s (%.2f ms/exec), engine %.3f s (%.2f ms/step), ratio %.3fx  (target <= 1.15x)")
    :format(n, PROFILE, raw, raw / n * 1000, engine, engine / n * 1000, engine / raw))
end

bench_scheduling()
bench_exec()
