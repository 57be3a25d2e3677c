-- Environment and conditions: `env` at workflow and step level reaching
-- every command of a step, `when` / `if` deciding whether a ready step
-- runs, and ctx:skip. Commands run in a real local session.
local wf = require "smol.workflow"
local h = require "spec.workflow_helpers"

local LOCAL = { profile = "local/default", workspace = "" }

local function run(def, opts)
  opts = opts or {}
  opts.report_dir = opts.report_dir or h.temp_dir()
  if opts.reports == nil then opts.reports = false end
  return wf.run(wf.define(def), opts)
end

describe("workflow env", function()
  after_each(h.cleanup)

  it("merges workflow and step env into every command of the step, the step winning", function()
    local seen = {}
    local r = run { sandbox = LOCAL, env = { CC = "gcc", MODE = "debug" }, steps = {
      { name = "a", env = { MODE = "release", EXTRA = "1" }, run = function(ctx)
        seen.a = ctx:sh('echo "$CC $MODE $EXTRA"').stdout
        seen.own = ctx:exec{ "sh", "-c", 'echo "$MODE"', env = { MODE = "mine" } }.stdout
        local p = ctx:spawn{ "sh", "-c", 'echo "$CC"' }
        seen.spawned = p:wait().stdout
        seen.ctx_env = ctx.env.MODE
      end },
      { name = "b", run = function(ctx) seen.b = ctx:sh('echo "$CC ${MODE} ${EXTRA:-unset}"').stdout end },
    } }
    assert.are.equal("success", r.result, h.find(r, "a").error)
    assert.are.same({ a = "gcc release 1\n", own = "mine\n", spawned = "gcc\n", ctx_env = "release",
      b = "gcc debug unset\n" }, seen)
  end)

  it("refuses env values that are not strings, naming the step and field", function()
    local ok, err = pcall(wf.define, { steps = { { name = "a", env = { N = 3 }, run = function() end } } })
    assert.is_false(ok)
    assert.matches("step 'a': field 'env' must be a table of environment variables", tostring(err))
  end)
end)

describe("workflow conditions", function()
  after_each(h.cleanup)

  it("skips a step whose `when` is false, with the reason, and its dependents", function()
    local ran = {}
    local r = run { params = { deploy = "no" }, steps = {
      { name = "build", run = function() ran.build = true; return { version = "1.2" } end },
      { name = "deploy", needs = "build",
        when = function(ctx) return ctx.params.deploy == "yes", "deploy is off" end,
        run = function() ran.deploy = true end },
      { name = "announce", needs = "deploy", run = function() ran.announce = true end },
      { name = "tag", needs = "build", ["if"] = function(ctx) return ctx.inputs.build.version == "1.2" end,
        run = function() ran.tag = true end },
      { name = "never", ["if"] = function() return false end, run = function() ran.never = true end },
    } }
    assert.are.same({ build = true, tag = true }, ran)
    assert.are.equal("success", r.result, "a skip the workflow asked for does not fail the run")
    assert.are.same({ "skipped", "deploy is off" }, { h.find(r, "deploy").status, h.find(r, "deploy").error })
    assert.are.same({ "skipped", "needs 'deploy', which was skipped" },
      { h.find(r, "announce").status, h.find(r, "announce").error })
    assert.are.equal("`if` returned false", h.find(r, "never").error)
    assert.are.equal(0, #h.find(r, "deploy").attempts)
  end)

  it("fails a step whose condition raises, and refuses both `when` and `if`", function()
    local r = run { steps = { { name = "a", when = function() error("no", 0) end, run = function() end } } }
    assert.are.same({ "failed", "`when` raised: no" }, { h.find(r, "a").status, h.find(r, "a").error })
    local ok, err = pcall(wf.define, { steps = { { name = "a", when = function() end,
      ["if"] = function() end, run = function() end } } })
    assert.is_false(ok)
    assert.matches("step 'a': give 'when' or 'if', not both", tostring(err))
  end)

  it("lets a step skip itself with ctx:skip(reason); it is not retried", function()
    local tries = 0
    local r = run { steps = {
      { name = "a", retry = { attempts = 3 }, run = function(ctx)
        tries = tries + 1
        ctx:skip("nothing changed")
      end },
      { name = "b", needs = "a", run = function() end },
    } }
    assert.are.equal(1, tries)
    assert.are.same({ "skipped", "nothing changed" }, { h.find(r, "a").status, h.find(r, "a").error })
    assert.are.equal("skipped", h.find(r, "b").status)
    assert.are.equal("success", r.result)
  end)
end)
