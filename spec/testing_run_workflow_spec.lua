-- testing.run_workflow: a scenario runs a whole workflow on the bundled
-- provider and inspects the outcome.
local core = require "smol.core"
local fs = require "smol.fs"
local lfs = require "lfs"
local sandbox = require "smol.sandbox"
local testing = require "smol.testing"

local FILE = "spec/fixtures/testing_workflow.lua"

describe("testing.run_workflow", function()
  local ws
  before_each(function() ws = fs.temp_dir("smolwf-runwf-spec") end)
  after_each(function() testing.remove_tree(ws) end)

  it("runs a workflow file and returns its run: statuses, exit codes, logs", function()
    local report_dir = ws .. "/report"
    local run = testing.run_workflow(FILE, {args = {"hi"}, report_dir = report_dir,
      open = function(spec) spec.workspace = ws; return sandbox.open(spec) end})
    assert.same("success", run.result)
    assert.same("success", run.by_id.build.status)
    assert.same(0, run.by_id.build.exit_code)
    assert.same("hi ann\n", testing.report_file(run, run.by_id["run[who=ann]"].logs.stdout))
    assert.same("hi bob\n", testing.report_file(run, run.by_id["run[who=bob]"].logs.stdout))
    assert.same("failed", run.by_id.lint.status)
    assert.same(1, run.by_id.lint.exit_code)
    assert.truthy(lfs.attributes(report_dir .. "/report.json"))
  end)

  it("names a file that cannot be loaded or is not a workflow", function()
    local ok, err = pcall(testing.run_workflow, ws .. "/nope.lua")
    assert.is_false(ok)
    assert.matches("cannot load " .. ws .. "/nope.lua", err, 1, true)
    local f = assert(io.open(ws .. "/plain.lua", "w"))
    f:write("return 42\n")
    f:close()
    ok, err = pcall(testing.run_workflow, ws .. "/plain.lua")
    assert.matches("did not return a workflow", err, 1, true)
  end)

  it("puts the report in a temp directory removed at exit by default", function()
    local script = ws .. "/script.lua"
    local f = assert(io.open(script, "w"))
    f:write(([[
      local run = require("smol.testing").run_workflow(%q)
      print(run.result, run.report_dir)
    ]]):format(FILE))
    f:close()
    local r = sandbox.host{cwd = "."}:exec{core.exe_path(), script, env = {WS = ws}}
    assert.exec_ok(r)
    local result, dir = r.stdout:match("^(%S+)\t(%S+)\n$")
    assert.same("success", result)
    assert.matches("smolwf%-test%-run%-", dir)
    assert.is_nil(lfs.attributes(dir), dir .. " outlived the run")
  end)
end)
