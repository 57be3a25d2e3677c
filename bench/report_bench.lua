--[[
The progress/report benchmark, run by smolwf:

  smolwf bench/report_bench.lua [INSTANCES] [CHUNKS]

Builds a finished run of INSTANCES step instances (default 1000) by hand
and prints how long each observer and writer takes on it:
  - logs: every instance writes CHUNKS (default 10) output chunks to stdout
    and one to stderr, so 2 log files per instance (file creation dominates);
  - events (--json) and the plain progress lines, written to /dev/null;
  - the live view: how many redraws a 1-second burst of 100k output
    chunks causes (its target: at most ~10 per second, whatever the rate);
  - report.json, junit.xml, report.html and the summary table.
]]
local core = require "smol.core"
local task = require "smol.task"

local N = math.tointeger(tonumber(arg and arg[1] or "")) or 1000
local CHUNKS = math.tointeger(tonumber(arg and arg[2] or "")) or 10

local function ms(seconds) return string.format("%8.1f ms", seconds * 1000) end
local function report(name, value, note)
  print(string.format("%-34s %s%s", name, value, note and ("   " .. note) or ""))
end

local function timed(f)
  local t0 = core.now()
  f()
  return core.now() - t0
end

local function new_run(dir)
  local run = {name = "bench", started_at = core.time(), report_dir = dir, jobs = 8, params = {}, instances = {}}
  for i = 1, N do
    local t = run.started_at + i * 0.001
    run.instances[i] = {id = "step[" .. i .. "]", step = "step", matrix = {i = i}, needs = {}, status = "running",
      queued_at = t, started_at = t, attempts = {{started_at = t}}, artifacts = {}}
  end
  return run
end

local function finish(inst)
  inst.status, inst.ended_at, inst.duration, inst.exit_code = "success", inst.started_at + 0.001, 0.001, 0
  inst.attempts[1].ended_at, inst.attempts[1].status = inst.ended_at, "success"
end

-- Plays the run through one observer: started, CHUNKS stdout chunks, one stderr chunk, finished.
local function play(run, obs)
  if obs.run_started then obs:run_started(run) end
  for _, inst in ipairs(run.instances) do
    obs:step_started(run, inst, 1)
    for c = 1, CHUNKS do obs:step_output(run, inst, "stdout", "compiling file_" .. c .. ".c\n") end
    obs:step_output(run, inst, "stderr", "warning: something\n")
    finish(inst)
    obs:step_finished(run, inst)
  end
  run.ended_at, run.result = core.time(), "success"
  if obs.run_finished then obs:run_finished(run) end
end

local function live_redraws()
  local devnull = assert(io.open("/dev/null", "w"))
  local obs = require("smol.workflow.progress").new({out = devnull, live = true, width = 120})
  local inst = {id = "burst", started_at = core.time()}
  local run = {name = "live", started_at = inst.started_at, instances = {inst}}
  obs:run_started(run)
  obs:step_started(run, inst, 1)
  local t0, chunks = core.now(), 0
  while core.now() - t0 < 1 do
    for _ = 1, 1000 do chunks = chunks + 1; obs:step_output(run, inst, "stdout", "line " .. chunks .. "\n") end
    task.sleep(0)
  end
  local elapsed = core.now() - t0
  obs:run_finished(run)
  devnull:close()
  return obs.draws, chunks, elapsed
end

local dir = assert(core.mkdtemp("/tmp/smolwf-report-bench-XXXXXX"))
local devnull = assert(io.open("/dev/null", "w"))
print(string.format("%d step instances, %d stdout chunks + 1 stderr chunk each", N, CHUNKS))
report("logs (2 files per instance)", ms(timed(function() play(new_run(dir), require("smol.workflow.logs").new()) end)))
report("events (--json)", ms(timed(function() play(new_run(dir), require("smol.workflow.events").new({out = devnull})) end)))
report("progress, plain lines", ms(timed(function() play(new_run(dir), require("smol.workflow.progress").new({out = devnull, live = false})) end)))
local run = new_run(dir)
play(run, {step_started = function() end, step_output = function() end, step_finished = function() end})
for _, w in ipairs({"report_json", "report_junit", "report_html"}) do
  report(w .. ".write", ms(timed(function() require("smol.workflow." .. w).write(run) end)))
end
report("summary.render", ms(timed(function() require("smol.workflow.summary").render(run) end)))
local draws, chunks, elapsed = live_redraws()
report("live view redraws", string.format("%8d", draws), string.format("for %d chunks in %.2f s", chunks, elapsed))
devnull:close()
os.execute("rm -rf '" .. dir .. "'")
