-- Workflow engine benchmark (prints figures; not a timed test).
--
--   smolwf bench/workflow_bench.lua [PROFILE]      (default profile local/default)
--
-- 1. Scheduling 1,000 no-op steps (pure Lua, no sandbox): flat, and as one
--    chain. Target < 1 s. Planning (wf.define, wf.instances) a chain of
--    5,000 steps defined in reverse order, and of 1,000: linear, i.e. ~5x.
-- 2. 200 steps each running `true` through the provider with jobs = 8,
--    side by side with 200 raw `exec` calls from 8 tasks on one session,
--    in paired rounds (the median of their ratios). Target: engine / raw
--    <= 1.15x.
-- 3. A step printing 30 MB of 57-byte lines (the per-chunk path: live line,
--    observers, log files) vs the same command through a raw exec; with and
--    without the captured copy. Target: close to raw (was 30x+ slower).
-- 4. The live progress view under a flood of output: 200,000 lines of
--    ~100 bytes through its step_output, in bursts of 100 with a loop turn
--    between (its redraw timer fires meanwhile, every 0.05 s). Prints
--    chunks/s and the redraws; the redraws stay ~1 per interval however
--    fast the chunks come.
local wf = require "smol.workflow"
local task = require "smol.task"
local core = require "smol.core"
local sandbox = require "smol.sandbox"

local PROFILE = arg[1] or "local/default"
local ROUNDS = 3        -- pure-Lua figures: the best of ROUNDS
local EXEC_ROUNDS = 9   -- figures against a raw exec: the median of EXEC_ROUNDS paired rounds
local lib = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua")
local median, middle_half = lib.median, lib.middle_half

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

-- Times one run; the report dir is made and removed outside the timing.
local function timed_run(def, opts)
  local dir = temp_report_dir()
  opts.report_dir, opts.reports = dir, false
  local run
  local t = timed(function() run = wf.run(wf.define(def), opts) end)
  rm_rf(dir)
  assert(run.result == "success", "bench run failed: " .. tostring(run.result))
  return t
end

local function best_run(def_fn, opts_fn)
  local best = math.huge
  for _ = 1, ROUNDS do best = math.min(best, timed_run(def_fn(), opts_fn())) end
  return best
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
    local t = best_run(function() return noop_steps(1000, chained) end,
      function() return { jobs = 8 } end)
    print(("schedule 1000 no-op steps (%s): %.3f s  (target < 1 s)")
      :format(chained and "one chain" or "independent", t))
  end
end

-- A chain defined in reverse: each step needs the one defined after it.
local function reverse_chain(n)
  local steps = {}
  for i = 1, n do
    steps[i] = { name = "c" .. (n - i + 1), run = function() end, needs = i < n and { "c" .. (n - i) } or nil }
  end
  return { name = "reverse", steps = steps }
end

local function best_planning(n)
  local best = math.huge
  for _ = 1, ROUNDS do
    local def = reverse_chain(n)
    best = math.min(best, timed(function() wf.instances(wf.define(def)) end))
  end
  return best
end

local function bench_planning()
  local small, large = best_planning(1000), best_planning(5000)
  print(("plan a chain of 5000 steps defined in reverse: %.3f s (1000 steps: %.3f s, %.1fx for 5x the steps)")
    :format(large, small, large / small))
end

local function exec_steps(n)
  local steps = {}
  for i = 1, n do
    steps[i] = { name = "t" .. i, run = function(ctx) ctx:exec { "true" } end }
  end
  return { name = "exec", sandbox = { profile = PROFILE, workspace = "" }, steps = steps }
end

-- n execs of `true` from `workers` tasks on session sb.
local function raw_execs(sb, n, workers)
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
  task.all(fns)
end

-- The engine on an already open session (its close is left to us), so
-- that only the engine's own cost is compared with the raw calls.
local function shared(sb)
  return function()
    return { capabilities = sb.capabilities, close = function() end,
      exec = function(_, o) return sb:exec(o) end }
  end
end

-- The rounds' medians and the median of their ratios (engine / raw), with the middle half.
local function ratio_figures(raw, engine)
  local ratios = {}
  for i = 1, #raw do ratios[i] = engine[i] / raw[i] end
  return median(raw), median(engine), median(ratios), middle_half(ratios)
end

local function report(what, n, raw, engine)
  local r, e, ratio, low, high = ratio_figures(raw, engine)
  print(("%d x exec `true` (%s), 8 at a time, %s: raw %.3f s (%.2f ms/exec), engine %.3f s (%.2f ms/step), ratio %.3fx  (median of %d rounds' ratios, middle half %.2f-%.2fx; target <= 1.15x)")
    :format(n, PROFILE, what, r, r / n * 1000, e, e / n * 1000, ratio, #raw, low, high))
end

--[[
Raw and engine run back to back in each round, and the figure is the
median of the rounds' ratios: on a shared VM the cost of starting a
process shifts every few seconds, and a 0.1 s run measured apart from its
counterpart can land on either side of a shift.
]]
local function bench_exec()
  local n, jobs = 200, 8
  local sb = sandbox.open { profile = PROFILE, workspace = "" }
  raw_execs(sb, 16, jobs)  -- warm up: provider started, caches hot
  local raw, engine, raw_open, engine_open = {}, {}, {}, {}
  for r = 1, EXEC_ROUNDS do
    raw[r] = timed(function() raw_execs(sb, n, jobs) end)
    engine[r] = timed_run(exec_steps(n), { jobs = jobs, open = shared(sb) })
    raw_open[r] = timed(function()
      local own = sandbox.open { profile = PROFILE, workspace = "" }
      raw_execs(own, n, jobs)
      own:close()
    end)
    engine_open[r] = timed_run(exec_steps(n), { jobs = jobs })
  end
  sb:close()
  report("same open session", n, raw, engine)
  report("each opening and closing its session", n, raw_open, engine_open)
end

local OUTPUT_BYTES = 30 * 1000 * 1000
local OUTPUT_CMD = "yes 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' | head -c " .. OUTPUT_BYTES

-- The engine's whole per-chunk path: log files on (reports = true writes
-- them), the live line, observers; report files are written too.
local function timed_output_run(capture)
  local dir = temp_report_dir()
  local def = { name = "output", sandbox = { profile = PROFILE, workspace = "" }, steps = {
    { name = "print", run = function(ctx) ctx:exec { "sh", "-c", OUTPUT_CMD, capture = capture } end } } }
  local run
  local t = timed(function() run = wf.run(wf.define(def), { report_dir = dir }) end)
  rm_rf(dir)
  assert(run.result == "success", "bench run failed: " .. tostring(run.result))
  return t
end

local function bench_output()
  for _, capture in ipairs { false, true } do
    local raw, engine = {}, {}
    for r = 1, EXEC_ROUNDS do
      raw[r] = timed(function()
        local sb = sandbox.open { profile = PROFILE, workspace = "" }
        sb:exec { "sh", "-c", OUTPUT_CMD, capture = capture, on_stdout = function() end }
        sb:close()
      end)
      engine[r] = timed_output_run(capture)
    end
    local rs, es, ratio, low, high = ratio_figures(raw, engine)
    print(("30 MB of short lines (%s, capture %s): raw exec %.3f s, workflow step %.3f s, ratio %.2fx  (median of %d rounds' ratios, middle half %.2f-%.2fx)")
      :format(PROFILE, tostring(capture), rs, es, ratio, #raw, low, high))
  end
end

local PROGRESS_CHUNKS, PROGRESS_BURST = 200000, 100

local function bench_progress()
  local progress = require "smol.workflow.progress"
  local sink = {write = function(self) return self end, flush = function(self) return self end}
  local obs = progress.new({out = sink, live = true, width = 60, interval = 0.05, summary = false})
  local a = {id = "compile", status = "running", started_at = core.time(), attempts = {{started_at = core.time()}}}
  local run = {name = "progress", started_at = core.time(), instances = {a}}
  obs:run_started(run)
  obs:step_started(run, a, 1)
  local filler = string.rep("x", 80)
  local t = timed(function()
    local n = 0
    for _ = 1, PROGRESS_CHUNKS // PROGRESS_BURST do
      for _ = 1, PROGRESS_BURST do
        n = n + 1
        obs:step_output(run, a, "stdout", "\27[1mcompiling file_" .. n .. ".c\27[0m " .. filler .. "\n")
      end
      core.run_nowait()
    end
  end)
  obs:run_finished(run)
  print(("live progress view, %d output chunks in bursts of %d: %.3f s (%.0f chunks/s), %d redraws in %.2f s")
    :format(PROGRESS_CHUNKS, PROGRESS_BURST, t, PROGRESS_CHUNKS / t, obs.draws, t))
end

bench_scheduling()
bench_planning()
bench_exec()
bench_output()
bench_progress()
