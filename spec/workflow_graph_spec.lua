-- The expanded step graph (`smolwf run --graph dot|mermaid`, the Graph beside
-- the timeline in report.html) and step return values in the reports.
local cjson = require "cjson"
local wf = require "smol.workflow"
local graph = require "smol.workflow.graph"
local h = require "spec.workflow_helpers"

local function noop() end

local DEF = { name = "mx", steps = {
  { name = "build", matrix = { cc = { "gcc", "clang" } },
    run = function(ctx) return { bin = "app-" .. ctx.matrix.cc, size = 3, tags = {} } end },
  { name = "test", needs = "build", matrix = { cc = { "gcc", "clang" } },
    run = function() return function() end end },
  { name = "report", needs = "test", always = true, run = function() return 'say "hi"' end },
} }

describe("the step graph", function()
  after_each(h.cleanup)

  it("is dot and mermaid text of the expanded instances, one edge per need", function()
    local insts = wf.instances(wf.define(DEF))
    local dot = graph.dot(insts, "mx")
    assert.matches('^digraph "mx" {\n  rankdir=LR;\n', dot)
    assert.truthy(dot:find('  "build[cc=gcc]" -> "test[cc=gcc]";\n', 1, true))
    assert.is_nil(dot:find('"build[cc=gcc]" -> "test[cc=clang]"', 1, true), "matching instances only")
    assert.truthy(dot:find('  "report" [style="rounded,dashed"];\n', 1, true))
    local mermaid = graph.mermaid(insts)
    assert.matches("^flowchart LR\n  n1%(\"build%[cc=gcc%]\"%)\n", mermaid)
    assert.truthy(mermaid:find("  n1 --> n3\n", 1, true))
    assert.truthy(mermaid:find('  n5(["report"])\n', 1, true))
  end)

  it("is printed by smolwf run --graph, with --step applied", function()
    local file = h.temp_dir() .. ".lua"
    require("smol.fs").write_file(file, [[
      local wf = require "smol.workflow"
      return wf.define{name = "g", steps = {
        {name = "a", run = function() end}, {name = "b", needs = "a", run = function() end},
        {name = "c", run = function() end}}}]])
    local r = h.smolwf { "run", file, "--graph", "--step", "b" }
    os.remove(file)
    assert.are.same({ 0, 'digraph "g" {\n  rankdir=LR;\n  node [shape=box, style=rounded, fontname="sans-serif"];\n'
      .. '  "a";\n  "b";\n  "a" -> "b";\n}\n' }, { r.code, r.stdout })
    assert.matches("%-%-graph takes dot or mermaid, got 'svg'", h.smolwf { "run", "--graph=svg", "x.lua" }.stderr)
  end)

  it("shows beside the timeline in report.html, nodes linked to their logs", function()
    local dir = h.temp_dir()
    local run = wf.run(wf.define(DEF), { report_dir = dir })
    local html = h.read(dir .. "/report.html")
    local views = html:match('<div class="views">(.-)</div></section></div>')
    assert.is_string(views, "no side-by-side views")
    assert.truthy(views:find('<svg class="gantt"', 1, true))
    assert.truthy(views:find('<svg class="graph"', 1, true))
    assert.truthy(html:find('<a href="#log-1"><rect class="node success"', 1, true))
    assert.are.equal(2, select(2, html:gsub('<path class="edge"', "")) - 2, "2 build->test + 2 test->report")
    assert.are.equal("success", run.result)
  end)
end)

describe("step return values", function()
  after_each(h.cleanup)

  it("are in report.json when JSON can say them, else null with why, and shown in report.html", function()
    local dir = h.temp_dir()
    wf.run(wf.define(DEF), { report_dir = dir })
    local report = cjson.decode(h.read(dir .. "/report.json"))
    local by_id = {}
    for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
    assert.are.same({ bin = "app-gcc", size = 3, tags = {} }, by_id["build[cc=gcc]"].value)
    assert.truthy(h.read(dir .. "/report.json"):find('"tags":[]', 1, true), "an empty table is a list")
    assert.are.equal(cjson.null, by_id["test[cc=gcc]"].value)
    assert.are.equal("not JSON-representable: a function", by_id["test[cc=gcc]"].value_note)
    assert.are.equal('say "hi"', by_id.report.value)
    local html = h.read(dir .. "/report.html")
    assert.truthy(html:find('<h3>return value</h3><pre class="value">"say \\"hi\\""</pre>', 1, true))
    assert.truthy(html:find("not JSON-representable: a function", 1, true))
  end)
end)
