-- End to end: a real `smolwf run --json` of spec/fixtures/report_workflow.lua
-- with the bundled provider; checks the event stream, the step logs,
-- report.json, junit.xml and report.html it leaves, and that nothing is
-- left running.
local cjson = require "cjson"
local core = require "smol.core"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local WORKFLOW = fixtures .. "report_workflow.lua"
if WORKFLOW:sub(1, 1) ~= "/" then WORKFLOW = require("lfs").currentdir() .. "/" .. WORKFLOW end

describe("workflow reports of a real run", function()
  local dir, status, stdout, events, report

  -- One run for every test: it is the expensive part (a provider, a sandbox).
  setup(function()
    dir = helpers.tmpdir()
    assert(require("lfs").mkdir(dir .. "/work"))
    local cmd = string.format("cd %q && %q run --json --report-dir %q %q 2>%q", dir .. "/work",
      core.exe_path(), dir .. "/report", WORKFLOW, dir .. "/stderr.txt")
    local p = io.popen(cmd)
    stdout = p:read("a")
    status = select(3, p:close())
    events = {}
    for _, line in ipairs(helpers.lines(stdout)) do events[#events + 1] = cjson.decode(line) end
    report = cjson.decode(helpers.read(dir .. "/report/report.json"))
  end)
  teardown(function() helpers.rmtree(dir) end)

  local function find_event(pred)
    for _, ev in ipairs(events) do if pred(ev) then return ev end end
  end

  it("exits 1 because a step failed, and leaves no process behind", function()
    assert.are.equal(1, status, helpers.read(dir .. "/stderr.txt"))
    assert.are.same({}, helpers.processes_matching(dir))
  end)

  it("streams one JSON event per line, from run_started to run_finished", function()
    assert.are.equal("run_started", events[1].type)
    assert.are.equal("run_finished", events[#events].type)
    assert.are.equal("failure", events[#events].result)
    assert.is_not_nil(find_event(function(e) return e.type == "step_output" and e.step == "hello" and e.text == "hi\n" end))
    local binary = find_event(function(e) return e.type == "step_output" and e.step == "hello" and e.stream == "stderr" end)
    assert.are.equal("warn \xff\n", binary.text or core.b64decode(binary.base64))
    assert.is_nil(binary.text)
    assert.is_not_nil(find_event(function(e) return e.type == "step_retry" and e.step == "flaky" end))
    assert.is_not_nil(find_event(function(e) return e.type == "step_log" and e.step == "flaky" and e.message == "attempt 1" end))
    local after = find_event(function(e) return e.type == "step_finished" and e.step == "after" end)
    assert.are.equal("skipped", after.status)
  end)

  it("writes report.json with every instance's result", function()
    assert.are.same({"report-e2e", "failure"}, {report.name, report.result})
    local got = {}
    for _, inst in ipairs(report.instances) do got[#got + 1] = inst.id .. "=" .. inst.status end
    assert.are.same({"hello=success", "flaky=success", "broken=failed", "after=skipped"}, got)
    assert.are.equal(2, #report.instances[2].attempts)
    assert.are.equal(3, report.instances[3].exit_code)
    assert.matches("exit code 3", report.instances[3].error)
  end)

  it("writes only valid UTF-8 in report.json and the event stream, whatever bytes a command wrote", function()
    local raw = helpers.read(dir .. "/report/report.json")
    assert.is_not_nil(utf8.len(raw), "report.json is not valid UTF-8")
    for i, line in ipairs(helpers.lines(stdout)) do
      assert.is_not_nil(utf8.len(line), "event line " .. i .. " is not valid UTF-8: " .. line)
    end
    local broken = report.instances[3]
    assert.matches("error: bad \u{FFFD} ]]> <x>", broken.error, 1, true)
    assert.is_nil(broken.error:find("[\1\27]"))
    local finished = find_event(function(e) return e.type == "step_finished" and e.step == "broken" end)
    assert.matches("error: bad \u{FFFD} ]]> <x>", finished.error, 1, true)
  end)

  it("keeps every step's output in its log files", function()
    local hello = report.instances[1]
    assert.are.equal("hi\n", helpers.read(dir .. "/report/" .. hello.logs.stdout))
    assert.are.equal("warn \xff\n", helpers.read(dir .. "/report/" .. hello.logs.stderr))
    local flaky_err = helpers.read(dir .. "/report/" .. report.instances[2].logs.stderr)
    assert.matches("^%[log%] attempt 1\nfirst\n%[retry%] retrying in", flaky_err)
    assert.matches("%-%-%-%-%- attempt 2 %-%-%-%-%-\n%[log%] attempt 2\n$", flaky_err)
    assert.are.same({}, report.instances[4].logs)
  end)

  it("writes junit.xml with the failure's stderr, valid against the XSD", function()
    local xml = helpers.read(dir .. "/report/junit.xml")
    assert.truthy(xml:find('tests="4" failures="1" errors="0" skipped="1"', 1, true))
    assert.truthy(xml:find("last 50 lines of stderr (logs/broken.stderr.log) ---\nboom\nerror: bad \u{FFFD} ]]&gt; &lt;x&gt;</failure>", 1, true))
    if not helpers.which("xmllint") then pending("xmllint not installed (apt-get install libxml2-utils)"); return end
    local p = io.popen(string.format("xmllint --noout --schema %q %q 2>&1", fixtures .. "junit.xsd", dir .. "/report/junit.xml"))
    local out = p:read("a")
    assert.is_true(p:close(), out)
  end)

  it("writes report.html with the timeline and every step", function()
    local html = helpers.read(dir .. "/report/report.html")
    assert.truthy(html:find("<svg", 1, true))
    for _, id in ipairs({"hello", "flaky", "broken", "after"}) do
      assert.truthy(html:find("<b>" .. id .. "</b>", 1, true), id)
    end
    assert.truthy(html:find('<line class="backoff"', 1, true))
  end)
end)
