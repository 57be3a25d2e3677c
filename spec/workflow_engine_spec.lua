-- Scheduling semantics of the workflow engine: needs, failures, skips,
-- cancellation, keep_going, continue_on_error, always, retry, timeout,
-- matrix, jobs cap, inputs, params, observers. Steps here are plain Lua
-- (the subject is scheduling, not sandboxing); steps that run processes
-- are in workflow_sandbox_spec.lua against the real provider.
local wf = require "smol.workflow"
local task = require "smol.task"

local h = require "spec.workflow_helpers"
local temp_dir = h.temp_dir

-- Records every observer call as "method id" strings.
local function recorder()
  local calls = {}
  local obs = setmetatable({ calls = calls }, { __index = function(_, method)
    return function(_, _, inst, ...)
      local extra = select("#", ...) > 0 and (" " .. tostring((...))) or ""
      calls[#calls + 1] = method .. (type(inst) == "table" and (" " .. inst.id) or "") .. extra
    end
  end })
  return obs
end

local function run(def, opts)
  opts = opts or {}
  opts.report_dir = opts.report_dir or temp_dir()
  if opts.reports == nil then opts.reports = false end
  opts.open = opts.open or function() error("no sandbox in this spec") end
  return wf.run(wf.define(def), opts)
end

local statuses, find = h.statuses, h.find

local function step(name, fn, extra)
  local s = { name = name, run = fn or function() end }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

local function fail() error("boom") end

describe("workflow engine", function()
  teardown(h.cleanup)

  it("runs steps after their needs, passing return values as inputs", function()
    local order = {}
    local r = run { name = "w", steps = {
      step("b", function(ctx) order[#order + 1] = "b"; return ctx.inputs.a + 1 end, { needs = "a" }),
      step("a", function() order[#order + 1] = "a"; return 41 end),
      step("c", function(ctx) order[#order + 1] = "c"; assert.are.equal(42, ctx.inputs.b) end,
        { needs = { "b" } }),
    } }
    assert.are.same({ "a", "b", "c" }, order)
    assert.are.equal("success", r.result)
    assert.are.equal(0, wf.exit_code(r))
    assert.are.same({ a = "success", b = "success", c = "success" }, statuses(r))
  end)

  it("skips dependents of a failed step and cancels the others", function()
    local r = run { steps = {
      step("bad", fail),
      step("dep", nil, { needs = "bad" }),
      step("slow", function() task.sleep(5) end),
      step("later", nil, { needs = "slow" }),
    } }
    assert.are.same({ bad = "failed", dep = "skipped", slow = "cancelled", later = "cancelled" },
      statuses(r))
    assert.are.equal("failure", r.result)
    assert.are.equal(1, wf.exit_code(r))
    assert.matches("boom", find(r, "bad").error)
    -- The status is recorded beside the message: no "skipped:" prefix to double.
    assert.are.equal("needs 'bad', which failed", find(r, "dep").error)
    assert.are.equal("step 'bad' failed", find(r, "slow").error)
    local slow_attempt = find(r, "slow").attempts[1]
    assert.are.equal("cancelled", slow_attempt.status)
    assert.is_number(slow_attempt.ended_at)
    assert.is_true(find(r, "slow").duration < 4)
  end)

  it("keeps independent steps running with keep_going", function()
    local r = run({ steps = {
      step("bad", fail),
      step("dep", nil, { needs = "bad" }),
      step("slow", function() task.sleep(0.05) end),
      step("later", nil, { needs = "slow" }),
    } }, { keep_going = true })
    assert.are.same({ bad = "failed", dep = "skipped", slow = "success", later = "success" },
      statuses(r))
    assert.are.equal("failure", r.result)
  end)

  it("lets dependents run after a continue_on_error failure", function()
    local r = run { steps = {
      step("lint", fail, { continue_on_error = true }),
      step("after", nil, { needs = "lint" }),
    } }
    assert.are.same({ lint = "failed", after = "success" }, statuses(r))
    assert.are.equal("success", r.result)
  end)

  it("runs always steps after failures, with the failed inputs missing", function()
    local seen
    local r = run { steps = {
      step("bad", fail),
      step("mid", nil, { needs = "bad" }),
      step("cleanup", function(ctx) seen = ctx.inputs end, { needs = "mid", always = true }),
    } }
    assert.are.same({ bad = "failed", mid = "skipped", cleanup = "success" }, statuses(r))
    assert.are.same({}, seen)
    assert.are.equal("failure", r.result)
  end)

  it("retries with backoff until an attempt succeeds", function()
    local calls, obs = 0, recorder()
    local r = run({ steps = {
      step("flaky", function(ctx)
        calls = calls + 1
        assert.are.equal(calls, ctx.attempt)
        if calls < 3 then error("try again") end
      end, { retry = { attempts = 3, backoff = 0.01 } }),
    } }, { observers = { obs } })
    assert.are.equal(3, calls)
    local inst = r.instances[1]
    assert.are.equal("success", inst.status)
    assert.are.equal(3, #inst.attempts)
    assert.are.equal("failed", inst.attempts[1].status)
    assert.matches("try again", inst.attempts[1].error)
    assert.are.equal("success", inst.attempts[3].status)
    assert.are.same({ "run_started", "step_queued flaky", "step_started flaky 1",
      "step_retry flaky 2", "step_started flaky 2", "step_retry flaky 3",
      "step_started flaky 3", "step_finished flaky", "run_finished" }, obs.calls)
  end)

  it("names log files so that no id becomes a hidden file or leaves logs/", function()
    local r = run { steps = { step("../../evil"), step("..") } }
    for _, inst in ipairs(r.instances) do
      for _, path in pairs(inst.logs) do
        assert.matches("^logs/[^/.][^/]*$", path)
      end
    end
    assert.are.equal("logs/___.._evil.stdout.log", find(r, "../../evil").logs.stdout)
  end)

  it("retries only when the predicate says so, and gives up after the attempts", function()
    local calls = 0
    local seen = {}
    local r = run { steps = {
      step("flaky", function()
        calls = calls + 1
        error(setmetatable({ exit_code = calls == 1 and 75 or 1 },
          { __tostring = function() return "exit " .. calls end }))
      end, { retry = { attempts = 5, when = function(e)
        seen[#seen + 1] = e.exit_code
        return e.exit_code == 75
      end } }),
    } }
    assert.are.equal(2, calls)
    assert.are.same({ 75, 1 }, seen)
    assert.are.equal("failed", r.instances[1].status)
    assert.are.equal(1, r.instances[1].exit_code)
    local r2 = run { steps = { step("x", fail, { retry = { attempts = 2 } }) } }
    assert.are.equal(2, #r2.instances[1].attempts)
  end)

  it("times out a step, retries it, and reports timed_out", function()
    local r = run { steps = {
      step("hang", function() task.sleep(30) end, { timeout = 0.05, retry = { attempts = 2 } }),
      step("after", nil, { needs = "hang" }),
    } }
    local inst = r.instances[1]
    assert.are.equal("timed_out", inst.status)
    assert.are.equal(2, #inst.attempts)
    assert.matches("timed out after 0.05s", inst.error)
    assert.are.equal("skipped", r.instances[2].status)
    assert.are.equal("failure", r.result)
    assert.is_true(inst.duration < 5)
  end)

  it("times out pure Lua code that never yields, even under pcall", function()
    local r = run { steps = {
      step("spin", function() while true do end end, { timeout = 0.1 }),
      step("swallow", function()
        for _ = 1, 1000 do pcall(function() while true do end end) end
      end, { timeout = 0.1 }),
    } }
    assert.are.same({ spin = "timed_out", swallow = "timed_out" }, statuses(r))
  end)

  it("expands a matrix; dependents wait for every instance and get all values", function()
    local got
    local r = run { steps = {
      step("test", function(ctx) task.sleep(0.01 * ctx.matrix.shard); return ctx.matrix.shard * 10 end,
        { matrix = { shard = { 1, 2, 3 } } }),
      step("sum", function(ctx) got = ctx.inputs.test end, { needs = "test" }),
    } }
    assert.are.same({ ["test[shard=1]"] = 10, ["test[shard=2]"] = 20, ["test[shard=3]"] = 30 }, got)
    assert.are.equal(4, #r.instances)
    assert.are.same({ shard = 2 }, r.instances[2].matrix)
  end)

  it("never runs more than jobs steps at once", function()
    local running, peak = 0, 0
    local steps = {}
    for i = 1, 12 do
      steps[i] = step("s" .. i, function()
        running = running + 1
        peak = math.max(peak, running)
        task.sleep(0.01)
        running = running - 1
      end)
    end
    local r = run({ jobs = 8, steps = steps }, { jobs = 3 })
    assert.are.equal(3, peak)
    assert.are.equal(3, r.jobs)
    assert.are.equal("success", r.result)
  end)

  it("runs only the selected step and what it needs", function()
    local ran = {}
    local function mark(ctx) ran[#ran + 1] = ctx.id end
    local r = run({ steps = { step("a", mark), step("b", mark, { needs = "a" }), step("c", mark) } },
      { steps = { "b" } })
    assert.are.same({ "a", "b" }, ran)
    assert.are.equal(2, #r.instances)
    local ok, err = pcall(run, { steps = { step("a", mark) } }, { steps = { "zz" } })
    assert.is_false(ok)
    assert.matches("unknown step 'zz' %(known steps: a%)", tostring(err))
  end)

  it("passes params over the workflow's defaults, and ctx.log to observers", function()
    local obs = recorder()
    local got
    run({ params = { a = "1", b = "2" }, steps = { step("p", function(ctx)
      got = ctx.params
      ctx.log("hello", 42)
      ctx:log("again")
    end) } }, { params = { b = "3" }, observers = { obs } })
    assert.are.same({ a = "1", b = "3" }, got)
    assert.are.same({ "run_started", "step_queued p", "step_started p 1", "step_log p hello 42",
      "step_log p again", "step_finished p", "run_finished" }, obs.calls)
  end)

  it("raises on unknown ctx fields, naming the known ones", function()
    local r = run { steps = { step("x", function(ctx) return ctx.iputs end) } }
    assert.matches("ctx has no field 'iputs' %(known: .*inputs", r.instances[1].error)
  end)

  it("names the colon a ctx method call is missing", function()
    local r = run { steps = { step("x", function(ctx) ctx.sh("true") end) } }
    assert.matches("call ctx:sh%(...%) with a colon, not ctx.sh%(...%)", r.instances[1].error)
  end)

  it("fills the run data model", function()
    local r = run { name = "model", steps = { step("a"), step("b", fail, { needs = "a", timeout = 9 }) } }
    assert.are.equal("model", r.name)
    assert.is_number(r.started_at)
    assert.is_true(r.ended_at >= r.started_at)
    local b = r.instances[2]
    assert.are.same({ "a" }, b.needs)
    assert.are.equal(9, b.timeout)
    assert.is_number(b.queued_at)
    assert.is_true(b.ended_at >= b.started_at)
    assert.are.same({ stdout = "logs/b.stdout.log", stderr = "logs/b.stderr.log" }, b.logs)
    assert.is_nil(b.def)
    assert.is_false(b.continue_on_error)
  end)

  it("reports an observer's error once and keeps running", function()
    local bad = { step_started = function() error("observer bug") end }
    local warnings = {}
    local r = run({ steps = { step("a"), step("b") } }, { observers = { bad },
      warn = function(msg) warnings[#warnings + 1] = msg end })
    assert.are.equal("success", r.result)
    assert.are.equal(1, #warnings)
    assert.matches("^observer error in step_started: .*observer bug", warnings[1])
  end)
end)
