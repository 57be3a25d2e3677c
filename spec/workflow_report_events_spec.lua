-- The --json event stream (smol.workflow.events): one JSON object per line
-- for every observer call; output as text when valid UTF-8, else base64.
local cjson = require "cjson"
local core = require "smol.core"
local events = require "smol.workflow.events"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")

-- An observer that records the method names the engine (here: the fixture) called.
local function call_recorder()
  local calls = {}
  return setmetatable({calls = calls}, {__index = function(_, method)
    return function() calls[#calls + 1] = method end
  end})
end

local function decode_lines(s)
  local out = {}
  for _, line in ipairs(helpers.lines(s)) do out[#out + 1] = cjson.decode(line) end
  return out
end

describe("workflow event stream", function()
  local dir, out, evs
  before_each(function()
    dir = helpers.tmpdir()
    out = helpers.sink()
    local recorder = call_recorder()
    workflow_run.play(dir, {events.new({out = out}), recorder})
    evs = decode_lines(out:text())
    evs.calls = recorder.calls
  end)
  after_each(function() helpers.rmtree(dir) end)

  it("writes one JSON object per observer call, in order, flushed line by line", function()
    assert.are.equal(#evs.calls, #evs)
    for i, ev in ipairs(evs) do assert.are.equal(evs.calls[i], ev.type) end
    assert.are.equal(#evs, out.flushes)
    assert.is_nil(out:text():find("\n\n", 1, true))
    for _, line in ipairs(helpers.lines(out:text())) do
      assert.matches('^{"type":"[%a_]+","time":[%d.e+]+[,}]', line)
    end
  end)

  it("stamps every event with a non-decreasing wall-clock time", function()
    local last = 0
    for _, ev in ipairs(evs) do
      assert.is_number(ev.time)
      assert.is_true(ev.time >= last)
      last = ev.time
    end
    assert.is_true(math.abs(last - core.time()) < 60)
  end)

  it("describes the run and its steps at the start", function()
    local first = evs[1]
    assert.are.equal("run_started", first.type)
    assert.are.equal("ci", first.run)
    assert.are.equal(8, #first.steps)
    assert.are.same({id = "test[shard=2]", name = "test", matrix = {shard = 2}, needs = {"build"}},
      first.steps[4])
    assert.are.same({}, first.steps[1].needs)
    assert.truthy(out:text():find('"needs":[]', 1, true))
  end)

  it("sends valid UTF-8 output as text and anything else as base64", function()
    local text_ev, binary_ev
    for _, ev in ipairs(evs) do
      if ev.type == "step_output" and ev.step == "deps" then text_ev = ev end
      if ev.type == "step_output" and ev.base64 then binary_ev = ev end
    end
    assert.are.same({"deps", "stdout", "fetching deps\nok\n"}, {text_ev.step, text_ev.stream, text_ev.text})
    assert.is_nil(text_ev.base64)
    assert.are.equal("test[shard=2]", binary_ev.step)
    assert.are.equal("stderr", binary_ev.stream)
    assert.is_nil(binary_ev.text)
    assert.are.equal("\xff\xfe binary junk\n", core.b64decode(binary_ev.base64))
  end)

  it("reports retries, logs and finished steps with their results", function()
    local by_type = {}
    for _, ev in ipairs(evs) do
      by_type[ev.type] = by_type[ev.type] or {}
      table.insert(by_type[ev.type], ev)
    end
    local retry = by_type.step_retry[1]
    assert.are.same({"build", 2, 0.5, "sh: make -j2 exited with 75"}, {retry.step, retry.attempt, retry.delay, retry.error})
    assert.are.equal("second try", by_type.step_log[1].message)
    local failed = by_type.step_finished[5]
    assert.are.same({"test[shard=2]", "failed", 2, 1}, {failed.step, failed.status, failed.exit_code, failed.attempts})
    assert.matches("^sh: make test SHARD=2 exited with 2\n", failed.error)
    local finished = evs[#evs]
    assert.are.same({"run_finished", "failure", 4, 2}, {finished.type, finished.result, finished.counts.success, finished.counts.failed})
  end)

  it("writes only valid UTF-8, cleaning errors and logs a command's bytes went into", function()
    local sink = helpers.sink()
    local obs = events.new({out = sink})
    local dirty = "\27[31merror:\27[0m bad \255\1 ]]> <x>"
    local inst = {id = "s\255", step = "s", status = "failed", attempts = {{}}, exit_code = 2, error = dirty}
    obs:step_log({}, inst, dirty)
    obs:step_retry({}, inst, 2, 0.5, dirty)
    obs:step_finished({}, inst)
    for _, line in ipairs(helpers.lines(sink:text())) do
      assert.is_not_nil(utf8.len(line), line)
      local ev = cjson.decode(line)
      assert.are.equal("s\u{FFFD}", ev.step)
      assert.are.equal("error: bad \u{FFFD} ]]> <x>", ev.error or ev.message)
    end
  end)

  it("tells which sandbox a session got", function()
    local sink = helpers.sink()
    events.new({out = sink}):session_opened({}, {key = "workflow", profile = "auto/default", isolation = "none"})
    local ev = cjson.decode(sink:text())
    assert.are.same({"session_opened", {key = "workflow", profile = "auto/default", isolation = "none"}}, {ev.type, ev.session})
  end)

  it("writes to stdout by default", function()
    local script = os.tmpname()
    finally(function() os.remove(script) end)
    helpers.write(script, [[
      local obs = require("smol.workflow.events").new()
      local inst = {id = "one", step = "one"}
      obs:step_started({}, inst, 1)
      obs:step_output({}, inst, "stdout", "hi\n")
    ]])
    local p = io.popen(string.format("%q %q", core.exe_path(), script))
    local lines = helpers.lines(p:read("a"))
    p:close()
    assert.are.equal(2, #lines)
    assert.are.same({type = "step_output", step = "one", stream = "stdout", text = "hi\n"},
      (function(e) e.time = nil; return e end)(cjson.decode(lines[2])))
  end)
end)
