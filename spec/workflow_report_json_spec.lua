-- report.json (smol.workflow.report_json): the run and every instance, for machines.
local cjson = require "cjson"
local logs = require "smol.workflow.logs"
local report_json = require "smol.workflow.report_json"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")

describe("workflow report.json", function()
  local dir, raw, report
  before_each(function()
    dir = helpers.tmpdir()
    local run = workflow_run.play(dir, {logs.new()})
    assert.are.equal(dir .. "/report.json", report_json.write(run))
    raw = helpers.read(dir .. "/report.json")
    report = cjson.decode(raw)
  end)
  after_each(function() helpers.rmtree(dir) end)

  it("describes the run", function()
    assert.are.same({1, "ci", "failure", workflow_run.T0, 4, {target = "x86_64"}},
      {report.format_version, report.name, report.result, report.started_at, report.jobs, report.params})
    assert.is_true(math.abs(report.ended_at - (workflow_run.T0 + 4.8)) < 1e-3)
    assert.is_true(math.abs(report.duration - 4.8) < 1e-3)
  end)

  it("lists every instance in order with status, exit code, timeout and error", function()
    local ids = {}
    for i, inst in ipairs(report.instances) do ids[i] = inst.id end
    assert.are.same({"deps", "build", "test[shard=1]", "test[shard=2]", "test[shard=3]", "lint", "package", "collect"}, ids)
    local shard2 = report.instances[4]
    assert.are.same({"test", {shard = 2}, {"build"}, "failed", 2}, {shard2.step, shard2.matrix, shard2.needs, shard2.status, shard2.exit_code})
    assert.matches("^sh: make test SHARD=2 exited with 2\nlast stderr:", shard2.error)
    assert.are.equal(600, report.instances[2].timeout)
    assert.are.equal(cjson.null, report.instances[1].timeout)
    assert.is_true(report.instances[6].continue_on_error)
    assert.is_true(report.instances[8].always)
  end)

  it("keeps every attempt with its own result", function()
    local build = report.instances[2]
    assert.are.equal(2, #build.attempts)
    assert.are.same({"failed", 75, "exit 75"}, {build.attempts[1].status, build.attempts[1].exit_code, build.attempts[1].error})
    assert.are.same({"success", 0, cjson.null}, {build.attempts[2].status, build.attempts[2].exit_code, build.attempts[2].error})
    assert.is_true(math.abs(build.attempts[1].duration - 0.48) < 1e-3)
    assert.is_true(math.abs(build.duration - 1.88) < 1e-3)
  end)

  it("gives log paths that exist, and artifact paths", function()
    for _, inst in ipairs(report.instances) do
      for _, rel in pairs(inst.logs) do assert.is_not_nil(io.open(dir .. "/" .. rel)) end
    end
    assert.are.same({stdout = "logs/deps.stdout.log"}, report.instances[1].logs)   -- it wrote no stderr
    assert.are.same({stdout = "logs/build.stdout.log", stderr = "logs/build.stderr.log"}, report.instances[2].logs)
    assert.are.same({}, report.instances[7].logs)
    assert.are.same({"artifacts/test-logs"}, report.instances[8].artifacts)
  end)

  it("writes empty lists as [] and absent values as null", function()
    assert.truthy(raw:find('"needs":[]', 1, true))
    assert.truthy(raw:find('"artifacts":[]', 1, true))
    assert.truthy(raw:find('"attempts":[]', 1, true))     -- package never ran
    local package = report.instances[7]
    assert.are.same({cjson.null, cjson.null, cjson.null}, {package.exit_code, package.started_at, package.duration})
  end)

  it("replaces the file atomically, leaving no temporary file", function()
    assert.is_nil(io.open(dir .. "/report.json.tmp"))
    local empty = {name = "empty", started_at = 1, ended_at = 2, result = "success", report_dir = dir, instances = {}}
    report_json.write(empty)
    assert.truthy(helpers.read(dir .. "/report.json"):find('"instances":[]', 1, true))
  end)

  it("writes odd user values (functions, NaN, cycles, mixed tables) as text", function()
    local cycle = {}
    cycle.self = cycle
    local params = {fn = print, nan = 0 / 0, list = {1, "two"}, mixed = {1, x = 2}, cycle = cycle}
    report_json.write({name = "odd", report_dir = dir, params = params, instances = {
      {id = "m", step = "m", status = "success", matrix = {opts = {"-O2", "-g"}}, attempts = {}}}})
    local got = cjson.decode(helpers.read(dir .. "/report.json"))
    assert.matches("^function: ", got.params.fn)
    assert.matches("nan", got.params.nan)
    assert.are.same({1, "two"}, got.params.list)
    assert.are.same({["1"] = 1, x = 2}, got.params.mixed)
    assert.are.same({"-O2", "-g"}, got.instances[1].matrix.opts)
  end)

  it("writes only valid UTF-8, cleaning the error a command's stderr went into", function()
    local dirty = "\27[31merror:\27[0m bad \255\1 ]]> <x>"
    local attempt = {started_at = 1, ended_at = 2, status = "failed", exit_code = 2, error = dirty}
    report_json.write({name = "n\255", report_dir = dir, params = {["k\254"] = "v\255"}, instances = {
      {id = "s\255", step = "s", status = "failed", attempts = {attempt}, error = dirty,
       matrix = {os = "\192"}, artifacts = {"artifacts/\255"}}}})
    local raw_text = helpers.read(dir .. "/report.json")
    assert.is_not_nil(utf8.len(raw_text), raw_text)
    local got = cjson.decode(raw_text)
    local inst = got.instances[1]
    assert.are.equal("error: bad \u{FFFD} ]]> <x>", inst.error)
    assert.are.equal("error: bad \u{FFFD} ]]> <x>", inst.attempts[1].error)
    assert.are.same({"n\u{FFFD}", "s\u{FFFD}", {["k\u{FFFD}"] = "v\u{FFFD}"}, {os = "\u{FFFD}"}},
      {got.name, inst.id, got.params, inst.matrix})
  end)

  it("names the sandbox session the run and each step got, null until the engine says", function()
    assert.are.same({cjson.null, cjson.null}, {report.sandbox, report.instances[1].sandbox})
    local sb = {profile = "auto/default", isolation = "none", network = true}
    report_json.write({name = "s", report_dir = dir, sandbox = sb, instances = {
      {id = "a", step = "a", status = "success", attempts = {}, sandbox = sb}}})
    local got = cjson.decode(helpers.read(dir .. "/report.json"))
    assert.are.same(sb, got.sandbox)
    assert.are.same(sb, got.instances[1].sandbox)
  end)

  it("creates a missing report directory", function()
    local run = {name = "x", report_dir = dir .. "/a/b/c", instances = {}}
    report_json.write(run)
    assert.are.equal("x", cjson.decode(helpers.read(dir .. "/a/b/c/report.json")).name)
  end)

  it("names the path when the report cannot be written", function()
    helpers.write(dir .. "/blocker", "")
    local ok, err = pcall(report_json.write, {name = "x", report_dir = dir .. "/blocker", instances = {}})
    assert.is_false(ok)
    assert.matches("report: cannot create directory `.*/blocker`", err)
  end)
end)
