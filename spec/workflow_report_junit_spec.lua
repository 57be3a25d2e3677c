-- junit.xml (smol.workflow.report_junit): one testcase per instance, in the
-- JUnit shape CI parsers read; checked with an XML parser (lxp) and against
-- the JUnit XSD in spec/fixtures/junit.xsd (xmllint).
local has_lxp, lxp = pcall(require, "lxp")
local logs = require "smol.workflow.logs"
local report_junit = require "smol.workflow.report_junit"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")
local XSD = fixtures .. "junit.xsd"

-- Parses XML into nested {tag=, attr=, text=, children} tables; raises if not well-formed.
local function parse(xml)
  local root = {children = {}}
  local stack = {root}
  local parser = lxp.new({
    StartElement = function(_, tag, attr)
      local node = {tag = tag, attr = attr, text = "", children = {}}
      table.insert(stack[#stack].children, node)
      stack[#stack + 1] = node
    end,
    EndElement = function() stack[#stack] = nil end,
    CharacterData = function(_, s) stack[#stack].text = stack[#stack].text .. s end,
  })
  local ok, err, line = parser:parse(xml)
  if ok then ok, err, line = parser:parse() end
  parser:close()
  assert(ok, string.format("junit.xml is not well-formed: %s at line %s", tostring(err), tostring(line)))
  return root.children[1]
end

local function child(node, tag)
  for _, c in ipairs(node.children) do if c.tag == tag then return c end end
end

-- Runs xmllint against the XSD; returns ok and its messages.
local function validate(path)
  local p = io.popen(string.format("xmllint --noout --schema %q %q 2>&1", XSD, path))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

-- Without lua-expat the parsing checks cannot run: say so instead of erroring.
local describe_parsed = describe
if not has_lxp then
  describe_parsed = function(name)
    describe(name, function()
      it("needs an XML parser", function() pending("lua-expat (lxp) not installed: apt-get install lua-expat") end)
    end)
  end
end

describe_parsed("workflow junit.xml", function()
  local dir, suites
  before_each(function()
    dir = helpers.tmpdir()
    local run = workflow_run.play(dir, {logs.new()})
    assert.are.equal(dir .. "/junit.xml", report_junit.write(run))
    suites = parse(helpers.read(dir .. "/junit.xml"))
  end)
  after_each(function() helpers.rmtree(dir) end)

  it("has one testsuite with the run's counts", function()
    assert.are.equal("testsuites", suites.tag)
    local suite = child(suites, "testsuite")
    for _, node in ipairs({suites, suite}) do
      assert.are.same({"ci", "8", "3", "0", "1", "4.800"},
        {node.attr.name, node.attr.tests, node.attr.failures, node.attr.errors, node.attr.skipped, node.attr.time})
    end
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d$", suite.attr.timestamp)
    local property = child(child(suite, "properties"), "property").attr
    assert.are.same({"param.target", "x86_64"}, {property.name, property.value})
  end)

  it("has one testcase per instance, named by id, classed by step", function()
    local cases = {}
    for _, c in ipairs(child(suites, "testsuite").children) do
      if c.tag == "testcase" then cases[#cases + 1] = c.attr.name .. " " .. c.attr.classname .. " " .. c.attr.time end
    end
    assert.are.same({"deps ci.deps 0.390", "build ci.build 1.880", "test[shard=1] ci.test 0.480",
      "test[shard=2] ci.test 0.880", "test[shard=3] ci.test 2.000", "lint ci.lint 1.280",
      "package ci.package 0.000", "collect ci.collect 0.270"}, cases)
  end)

  it("reports a failure with its message and the last 50 lines of stderr", function()
    local case = child(child(suites, "testsuite"), "testcase")
    for _, c in ipairs(child(suites, "testsuite").children) do
      if c.attr.name == "test[shard=2]" then case = c end
    end
    local failure = child(case, "failure")
    assert.are.equal("sh: make test SHARD=2 exited with 2", failure.attr.message)
    assert.are.equal("failed", failure.attr.type)
    assert.matches("^sh: make test SHARD=2 exited with 2\nlast stderr:\nFAIL test_parse\n", failure.text)
    local tail = failure.text:match("%-%-%- last 50 lines of stderr %(logs/test%[shard=2%]%.stderr%.log%) %-%-%-\n(.*)$")
    local lines = helpers.lines(tail .. "\n")
    assert.are.equal(50, #lines)
    assert.are.equal("FAIL line 11", lines[1])
    assert.are.equal("FAIL line 60", lines[50])
  end)

  it("marks timeouts as failures and never-run steps as skipped", function()
    local by_name = {}
    for _, c in ipairs(child(suites, "testsuite").children) do
      if c.tag == "testcase" then by_name[c.attr.name] = c end
    end
    assert.are.equal("timed_out", child(by_name["test[shard=3]"], "failure").attr.type)
    assert.are.equal("skipped: needs failed: test[shard=2], test[shard=3]", child(by_name.package, "skipped").attr.message)
    assert.are.equal(0, #by_name.deps.children)
  end)

  it("does not repeat the status the engine put before the message", function()
    local run = {name = "cut", started_at = 1, ended_at = 2, report_dir = dir, instances = {
      {id = "c", step = "c", status = "cancelled", attempts = {{}}, error = "cancelled: interrupted"},
      {id = "s", step = "s", status = "skipped", attempts = {}, error = "skipped: needs 'build' failed"},
      {id = "f", step = "f", status = "failed", attempts = {{}}, error = "failed: exit 2"}}}
    local doc = parse(report_junit.render(run))
    local cases = {}
    for _, c in ipairs(child(doc, "testsuite").children) do
      if c.tag == "testcase" then cases[c.attr.name] = c end
    end
    assert.are.equal("cancelled: interrupted", child(cases.c, "skipped").attr.message)
    assert.are.equal("skipped: needs 'build' failed", child(cases.s, "skipped").attr.message)
    assert.are.equal("exit 2", child(cases.f, "failure").attr.message)
  end)

  it("names the machine the run was on as the testsuite's hostname, escaped", function()
    local run = {name = "h", started_at = 1, ended_at = 2, report_dir = dir, instances = {}}
    report_junit.write(run)
    local f = assert(io.open("/proc/sys/kernel/hostname"))
    local machine = f:read("l")
    f:close()
    assert.are.equal(machine, child(parse(helpers.read(dir .. "/junit.xml")), "testsuite").attr.hostname)
    run.hostname = 'build<1>&"x"'
    report_junit.write(run)
    assert.matches(' hostname="build&lt;1&gt;&amp;&quot;x&quot;">', helpers.read(dir .. "/junit.xml"))
    local real = require("smol.workflow").run(require("smol.workflow").define{steps = {{name = "a", run = function() end}}},
      {report_dir = dir .. "/real"})
    assert.are.equal(machine, real.hostname)
  end)

  it("stays well-formed with hostile ids, errors and output", function()
    local hostile = {id = 'a<b>&"c\'', step = "x]]>", status = "failed", duration = 1,
                     attempts = {{}}, error = "bad \xff\xfe bytes\0 and \27[31mcolour\27[0m\n<tag>",
                     logs = {stderr = "logs/h.stderr.log"}}
    helpers.write(dir .. "/logs/h.stderr.log", "]]> <![CDATA[ \1\2 \xc3\x28 &amp;\n")
    local run = {name = "n<&>", started_at = 1, ended_at = 2, report_dir = dir, instances = {hostile}}
    report_junit.write(run)
    local doc = parse(helpers.read(dir .. "/junit.xml"))
    local case = child(child(doc, "testsuite"), "testcase")
    assert.are.equal('a<b>&"c\'', case.attr.name)
    assert.are.equal("bad \u{FFFD}\u{FFFD} bytes and colour", child(case, "failure").attr.message)
    assert.truthy(child(case, "failure").text:find("]]> <![CDATA[  \u{FFFD}( &amp;", 1, true))
  end)

  describe("against the JUnit XSD", function()
    local have_xmllint = helpers.which("xmllint") ~= nil

    it("validates", function()
      if not have_xmllint then pending("xmllint not installed (apt-get install libxml2-utils)"); return end
      local ok, out = validate(dir .. "/junit.xml")
      assert.is_true(ok, out)
    end)

    it("rejects a document missing the counts (the check can fail)", function()
      if not have_xmllint then pending("xmllint not installed (apt-get install libxml2-utils)"); return end
      local broken = helpers.read(dir .. "/junit.xml"):gsub(' tests="8"', "", 1)
      helpers.write(dir .. "/broken.xml", broken)
      local ok, out = validate(dir .. "/broken.xml")
      assert.is_falsy(ok)
      assert.matches("tests", out)
    end)
  end)
end)
