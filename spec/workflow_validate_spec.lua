-- Validation of workflow definitions: every problem is reported, by name.
local validate = require "smol.workflow.validate"

local function noop() end

local function problems_of(def)
  local ok, err = pcall(validate.check, def)
  assert.is_false(ok)
  assert.are.equal("invalid_workflow", err.code)
  return err.message, err.problems
end

describe("workflow validation", function()
  it("accepts a complete workflow", function()
    local def = {
      name = "ci", jobs = 4, sandbox = { profile = "local/default" }, params = { a = "1" },
      steps = {
        { name = "deps", run = noop },
        { name = "build", needs = "deps", timeout = 600, run = noop },
        { name = "test", needs = { "build" }, matrix = { shard = { 1, 2, 3 } },
          retry = { attempts = 3, backoff = 0.5, when = noop }, run = noop },
        { name = "lint", needs = { "deps" }, continue_on_error = true, run = noop },
        { name = "collect", needs = { "test" }, always = true, run = noop,
          sandbox = {}, description = "collects" },
      },
    }
    assert.are.equal(def, validate.check(def))
  end)

  it("suggests the field a misspelled one meant", function()
    local msg = problems_of { name = "w", steps = { { name = "a", run = noop, neeeds = { "x" } } } }
    assert.matches("step 'a': unknown field 'neeeds' %(did you mean 'needs'%?%)", msg)
  end)

  it("lists the known fields when nothing is close", function()
    local msg = problems_of { steps = { { name = "a", run = noop, zzzzzzzzzz = 1 } } }
    assert.matches("unknown field 'zzzzzzzzzz' %(known fields: always, cache, continue_on_error", msg)
  end)

  it("names a field of the wrong type and what it must be", function()
    local msg = problems_of { steps = { { name = "a", run = noop, timeout = "10" } } }
    assert.matches('step \'a\': field \'timeout\' must be a positive number, got "10"', msg)
    msg = problems_of { jobs = 0, steps = { { name = "a", run = noop } } }
    assert.matches("workflow: field 'jobs' must be a positive integer, got 0$", msg)
    msg = problems_of { steps = { { name = "a", run = "echo" } } }
    assert.matches('field \'run\' must be a function, got "echo"', msg)
    msg = problems_of { steps = { { name = "a", run = noop, retry = { attempts = 2, backof = 1 } } } }
    assert.matches("step 'a' retry: unknown field 'backof' %(did you mean 'backoff'%?%)", msg)
    msg = problems_of { steps = { { name = "a", run = noop, matrix = { shard = {} } } } }
    assert.matches("field 'matrix' must be a table of lists of values, e%.g%. {shard = {1, 2}}, got {shard = {}}", msg)
    msg = problems_of { steps = { { name = "a", run = noop, matrix = { shard = 3 } } } }
    assert.matches("got {shard = 3}$", msg)
    msg = problems_of { steps = { { name = "a", run = noop, timeout = 0 } } }
    assert.matches("field 'timeout' must be a positive number, got 0$", msg)
    msg = problems_of { steps = {} }
    assert.matches("field 'steps' must be a non%-empty list of steps, got {}", msg)
  end)

  it("checks sandbox options, at the workflow and the step level", function()
    local msg = problems_of { sandbox = { workspce = "." }, steps = {
      { name = "a", run = noop, sandbox = { profile = 3 } } } }
    assert.matches("workflow sandbox: unknown field 'workspce' %(did you mean 'workspace'%?%)", msg)
    assert.matches("step 'a' sandbox: field 'profile' must be a string or {provider = ..., name = ...}, got 3", msg)
    -- sandbox.open's open_timeout, for a workspace whose copy takes long
    assert.matches("workflow sandbox: field 'open_timeout' must be a positive number, got 0",
      problems_of { sandbox = { open_timeout = 0 }, steps = { { name = "a", run = noop } } })
    assert.is_true(pcall(validate.check, { sandbox = { open_timeout = math.huge }, steps = { { name = "a", run = noop } } }))
  end)

  it("reports missing names and run functions, by position", function()
    local msg = problems_of { steps = { { run = noop }, { name = "b" } } }
    assert.matches("step #1: missing field 'name'", msg)
    assert.matches("step 'b': missing field 'run'", msg)
  end)

  it("reports duplicate names", function()
    local msg = problems_of { steps = { { name = "a", run = noop }, { name = "a", run = noop } } }
    assert.matches("duplicate step name 'a' %(steps #1 and #2%)", msg)
  end)

  it("lists the known steps for an unknown need", function()
    local msg = problems_of { steps = { { name = "a", run = noop }, { name = "b", run = noop, needs = { "c" } } } }
    assert.matches("step 'b' needs unknown step 'c' %(known steps: a, b%)", msg)
  end)

  it("prints a dependency cycle", function()
    local msg = problems_of { steps = {
      { name = "a", run = noop, needs = { "c" } },
      { name = "b", run = noop, needs = { "a" } },
      { name = "c", run = noop, needs = { "b" } },
      { name = "d", run = noop },
    } }
    assert.matches("dependency cycle: a %-> c %-> b %-> a", msg)
    msg = problems_of { steps = { { name = "a", run = noop, needs = "a" } } }
    assert.matches("step 'a' needs itself", msg)
  end)

  it("collects every problem in one error", function()
    local msg, problems = problems_of { nme = "x", steps = {
      { name = "a", run = noop, timeout = -1 }, { name = "a", run = noop, needs = { "zz" } } } }
    assert.are.equal(4, #problems)
    -- No name: the CLI names it by its file (validate.named), never '?'.
    assert.matches("^invalid workflow:\n  workflow: unknown field 'nme' %(did you mean 'name'%?%)", msg)
  end)

  it("rejects steps given as a map", function()
    local msg = problems_of { steps = { build = { run = noop } } }
    assert.matches("field 'steps' must be a non%-empty list of steps", msg)
  end)

  it("rejects brackets in step names (they mark matrix instances)", function()
    local msg = problems_of { steps = { { name = "a[1]", run = noop } } }
    assert.matches("field 'name' must be a non%-empty string without '%[' or '%]'", msg)
  end)
end)
