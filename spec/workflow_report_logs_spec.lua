-- Step logs (smol.workflow.logs): every instance's full stdout and stderr in
-- logs/<id>.<stream>.log under the report directory, byte for byte.
local logs = require "smol.workflow.logs"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")

describe("workflow step logs", function()
  local dir
  before_each(function() dir = helpers.tmpdir() end)
  after_each(function() helpers.rmtree(dir) end)

  local function log_of(run, id, stream)
    for _, inst in ipairs(run.instances) do
      if inst.id == id then return helpers.read(dir .. "/" .. inst.logs[stream]) end
    end
  end

  it("writes each instance's stdout and stderr to its own file, byte for byte", function()
    local run = workflow_run.play(dir, {logs.new()})
    assert.are.equal("fetching deps\nok\n", log_of(run, "deps", "stdout"))
    local stderr = log_of(run, "test[shard=2]", "stderr")
    assert.are.equal("\xff\xfe binary junk\nFAIL line 1\n", stderr:sub(1, 27))
    assert.truthy(stderr:find("FAIL line 60\n$"))
    assert.are.equal("logs/test[shard=2].stdout.log", run.instances[4].logs.stdout)
  end)

  it("marks retries and ctx.log messages in the log", function()
    local run = workflow_run.play(dir, {logs.new()})
    assert.are.equal("cc -c main.c\n----- attempt 2 -----\ncc -o app main.o\n", log_of(run, "build", "stdout"))
    assert.are.equal(table.concat({
      'main.c:3: warning: <unused> & "odd"',
      "[retry] retrying in 0.5s after: sh: make -j2 exited with 75",
      "----- attempt 2 -----",
      "[log] second try", ""}, "\n"), log_of(run, "build", "stderr"))
  end)

  it("starts its own lines on a fresh line after output without a newline", function()
    local obs = logs.new()
    local inst = {id = "x", step = "x"}
    local run = {report_dir = dir, instances = {inst}}
    obs:run_started(run)
    obs:step_started(run, inst, 1)
    obs:step_output(run, inst, "stderr", "partial")
    obs:step_log(run, inst, "note")
    obs:step_finished(run, inst)
    assert.are.equal("partial\n[log] note\n", helpers.read(dir .. "/logs/x.stderr.log"))
  end)

  it("creates a stream's file at its first byte, so a quiet step costs no file", function()
    workflow_run.play(dir, {logs.new()})
    assert.is_nil(io.open(dir .. "/logs/deps.stderr.log"))
    assert.is_nil(io.open(dir .. "/logs/collect.stdout.log"))
  end)

  it("marks the attempt when a stream's first bytes come from a retry", function()
    local obs = logs.new()
    local inst = {id = "r"}
    local run = {report_dir = dir, instances = {inst}}
    obs:run_started(run)
    obs:step_started(run, inst, 1)
    obs:step_output(run, inst, "stderr", "oops\n")
    obs:step_started(run, inst, 2)
    obs:step_output(run, inst, "stdout", "fine\n")
    obs:run_finished(run)
    assert.are.equal("----- attempt 2 -----\nfine\n", helpers.read(dir .. "/logs/r.stdout.log"))
    assert.are.equal("oops\n----- attempt 2 -----\n", helpers.read(dir .. "/logs/r.stderr.log"))
  end)

  it("writes no log for an instance that never ran", function()
    local run = workflow_run.play(dir, {logs.new()})
    local package = run.instances[7]
    assert.are.equal("package", package.id)
    assert.is_nil(package.logs)
    assert.is_nil(io.open(dir .. "/logs/package.stdout.log"))
  end)

  it("keeps log file names inside logs/ and unique", function()
    assert.are.equal("logs/_._etc_passwd.stdout.log", logs.path_for("../etc/passwd", "stdout"))
    assert.are.equal("logs/a_b_c.stderr.log", logs.path_for("a b/c", "stderr"))
    local obs = logs.new()
    local a, b = {id = "a/b"}, {id = "a_b"}
    local run = {report_dir = dir, instances = {a, b}}
    obs:run_started(run)
    obs:step_started(run, a, 1)
    obs:step_started(run, b, 1)
    obs:step_output(run, a, "stdout", "from a/b")
    obs:step_output(run, b, "stdout", "from a_b")
    obs:run_finished(run)
    assert.are.equal("from a/b", helpers.read(dir .. "/logs/a_b.stdout.log"))
    assert.are.equal("from a_b", helpers.read(dir .. "/logs/a_b_.stdout.log"))
    assert.are.equal("logs/a_b.stdout.log", a.logs.stdout)
    assert.are.equal("logs/a_b_.stdout.log", b.logs.stdout)
  end)

  it("uses the paths the engine chose", function()
    local obs = logs.new()
    local inst = {id = "x", logs = {stdout = "logs/mine.out", stderr = "logs/mine.err"}}
    local run = {report_dir = dir, instances = {inst}}
    obs:run_started(run)
    obs:step_started(run, inst, 1)
    obs:step_output(run, inst, "stdout", "hello")
    obs:step_finished(run, inst)
    assert.are.equal("hello", helpers.read(dir .. "/logs/mine.out"))
  end)

  it("closes the files of instances cut short when the run ends", function()
    local obs = logs.new()
    local inst = {id = "cut"}
    local run = {report_dir = dir, instances = {inst}}
    obs:run_started(run)
    obs:step_started(run, inst, 1)
    obs:step_output(run, inst, "stdout", "before Ctrl-C")
    obs:run_finished(run)
    assert.is_nil(next(obs.open))
    -- Closed means flushed: the bytes are on disk now.
    assert.are.equal("before Ctrl-C", helpers.read(dir .. "/logs/cut.stdout.log"))
  end)

  it("names the path when the log directory cannot be made", function()
    helpers.write(dir .. "/logs", "a file where the directory should be")
    local run = {report_dir = dir, instances = {}}
    local ok, err = pcall(logs.new().run_started, logs.new(), run)
    assert.is_false(ok)
    assert.matches("cannot create directory `" .. dir:gsub("%p", "%%%0") .. "/logs`", err)
  end)
end)
