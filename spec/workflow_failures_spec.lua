-- How a failed step is shown: the last lines of its stderr under it in the
-- live view and the summary, errors that are tables, replay mismatches.
-- Steps run real commands in a local session.
local wf = require "smol.workflow"
local progress = require "smol.workflow.progress"
local summary = require "smol.workflow.summary"
local h = require "spec.workflow_helpers"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")

local LOCAL = { profile = "local/default", workspace = "" }

local function run(def, opts)
  opts = opts or {}
  opts.report_dir = opts.report_dir or h.temp_dir()
  if opts.reports == nil then opts.reports = false end
  return wf.run(wf.define(def), opts)
end

local COMPILE = [[
echo "gcc -c main.c"
echo "main.c: In function 'main':" >&2
echo "main.c:12:5: error: expected ';' before '}' token" >&2
exit 1
]]

describe("a failed step's stderr", function()
  after_each(h.cleanup)

  it("shows its last lines under it in the live view and the summary", function()
    local out = helpers.sink()
    local live = progress.new { out = out, live = true, color = false, width = 100, interval = 0.01 }
    local r = run({ name = "cc", sandbox = LOCAL, steps = {
      { name = "warn", run = function(ctx) ctx:sh("echo 'a harmless warning' >&2") end },
      { name = "build", needs = "warn", run = function(ctx) ctx:sh(COMPILE) end },
    } }, { observers = { live } })
    assert.are.equal("failure", r.result)
    local screen = out:text()
    assert.matches("✗  build  [^\n]*failed %(exit 1%)[^\n]*\n   │ main.c: In function 'main':\n"
      .. "   │ main.c:12:5: error: expected ';' before '}' token\n", screen)
    assert.is_nil(screen:find("   │ a harmless warning", 1, true), "a succeeded step shows no stderr")
    local table_text = summary.render(r, { color = false, width = 100 })
    assert.matches("\n✗  build [^\n]*\n   │ main.c: In function 'main':\n   │ main.c:12:5: error: expected ';'",
      table_text)
  end)

  it("keeps only the last command's stderr, and only the last lines", function()
    local r = run({ sandbox = LOCAL, steps = {
      { name = "s", run = function(ctx)
        ctx:sh("echo first-command >&2")
        ctx:sh("for i in $(seq 1 30); do echo line-$i >&2; done; exit 3")
      end },
    } })
    local lines = require("smol.workflow.text").stderr_tail(h.find(r, "s"), 8)
    assert.are.same({ "line-23", "line-24", "line-25", "line-26", "line-27", "line-28", "line-29", "line-30" }, lines)
  end)
end)

describe("a failed step's binary stderr", function()
  after_each(h.cleanup)

  it("is summarised in the views, the error and the reports, not shown as noise", function()
    math.randomseed(5)
    local bytes = {}
    for i = 1, 20000 do bytes[i] = string.char(math.random(1, 255)) end
    local dir = h.temp_dir()
    local r = run({ sandbox = LOCAL, steps = {
      { name = "spew", run = function(ctx)
        ctx:write_file("blob", table.concat(bytes))
        ctx:sh("echo 'café: fine' >&2 && cat blob >&2; exit 3")
      end },
      { name = "texty", run = function(ctx) ctx:sh("printf 'caf\\351 is latin-1\\n' >&2; exit 4") end },
    } }, { report_dir = dir, reports = true, keep_going = true })
    local spew, texty = h.find(r, "spew"), h.find(r, "texty")
    local summary_line = "(20012 bytes of binary output)"
    assert.are.same({ { summary_line }, { "caf\u{FFFD} is latin-1" } },
      { require("smol.workflow.text").stderr_tail(spew, 8), require("smol.workflow.text").stderr_tail(texty, 8) })
    assert.matches("failed with exit code 3\nstderr: %(20012 bytes of binary output%)$", spew.error)
    assert.matches("\n   │ %(20012 bytes of binary output%)\n", summary.render(r, { color = false, width = 100 }))
    local junit = h.read(dir .. "/junit.xml")
    assert.matches("%-%-%- stderr %(logs/spew%.stderr%.log%) %-%-%-\n%(20012 bytes of binary output%)", junit)
    assert.is_nil(junit:find("\u{FFFD}\u{FFFD}", 1, true), "no run of replacement characters")
    assert.matches('<h3>stderr — <a [^>]*>logs/spew%.stderr%.log</a></h3><p class="empty">%(20012 bytes of binary output%)</p>',
      h.read(dir .. "/report.html"))
  end)
end)

describe("a replay mismatch", function()
  after_each(h.cleanup)

  it("has its own code, is not retried, and shows the whole differing value in the terminal", function()
    local recording, dir = h.temp_dir(), h.temp_dir()
    local fixture = "spec/fixtures/workflows/replayed.lua"
    local r = h.smolwf { "run", "--no-progress", "--record", recording, "--report-dir", h.temp_dir(),
      fixture, "--param", "jobs=2" }
    assert.are.equal(0, r.code, r.stderr)
    r = h.smolwf { "run", "--no-progress", "--replay", recording, "--report-dir", dir, fixture, "--param", "jobs=1" }
    assert.are.equal(1, r.code, r.stderr)
    local report = require("cjson").decode((h.read(dir .. "/report.json")))
    local build = report.instances[1]
    assert.are.equal(1, #build.attempts, "a replay mismatch is retried")
    assert.matches("replay_mismatch: replay: no request in the recording", build.error, 1, true)
    local row = r.stdout:match("\n   │ (  ! params%.argv%[3%][^\n]*)")
    assert.is_string(row, r.stdout)
    assert.truthy(row:find('"echo make all with a command line long enough to be cut -j2"', 1, true), row)
    assert.truthy(row:find('"echo make all with a command line long enough to be cut -j1"', 1, true), row)
  end)
end)
