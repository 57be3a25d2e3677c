-- The progress view (smol.workflow.progress): a live, timer-redrawn view in
-- a terminal, plain step-prefixed lines otherwise (CI logs, NO_COLOR).
local core = require "smol.core"
local task = require "smol.task"
local progress = require "smol.workflow.progress"
local text = require "smol.workflow.text"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")

local function plain_lines(s)
  return helpers.lines(s)
end

local function index_of(lines, wanted)
  for i, line in ipairs(lines) do if line == wanted then return i end end
end

describe("workflow progress, plain lines", function()
  local dir
  before_each(function() dir = helpers.tmpdir() end)
  after_each(function() helpers.rmtree(dir) end)

  it("prefixes every output line with its step id and marks finished steps", function()
    local out = helpers.sink()
    workflow_run.play(dir, {progress.new({out = out, live = false})})
    local lines = plain_lines(out:text())
    assert.are.equal("ci: 8 steps, jobs 4, report in " .. dir, lines[1])
    for _, wanted in ipairs({
      "[deps] started", "[deps] fetching deps", "[deps] ok", "✓  deps  390ms",
      "[build] cc -c main.c", '[build] main.c:3: warning: <unused> & "odd"',
      "[build] retrying in 500ms: sh: make -j2 exited with 75", "[build] started attempt 2",
      "[build] second try", "✓  build  1.9s  2 attempts",
      "[test[shard=2]] \u{FFFD}\u{FFFD} binary junk", "[test[shard=2]] FAIL line 60",
      "✗  test[shard=2]  880ms  failed (exit 2): sh: make test SHARD=2 exited with 2",
      "⏱  test[shard=3]  2.0s  timed out (exit 137): timed out after 2s",
      "↷  package  skipped: needs failed: test[shard=2], test[shard=3]",
    }) do
      assert.is_not_nil(index_of(lines, wanted), wanted)
    end
    assert.is_true(index_of(lines, "[deps] ok") < index_of(lines, "✓  deps  390ms"))
  end)

  it("ends with the summary table when asked, and writes no escape sequence", function()
    local out = helpers.sink()
    workflow_run.play(dir, {progress.new({out = out, live = false, summary = true})})
    local s = out:text()
    assert.is_nil(s:find("\27", 1, true))
    assert.truthy(s:find("\n   STEP%s+STATUS"))
    assert.truthy(s:find("ci failure in 4.8s", 1, true))
    local quiet = helpers.sink()
    workflow_run.play(dir, {progress.new({out = quiet, live = false})})
    assert.is_nil(quiet:text():find("STEP", 1, true))
  end)

  it("does not repeat the status the error message starts with, nor time a step that never ran", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = false})
    obs:step_finished({}, {id = "c", status = "cancelled", duration = 0, attempts = {},
                           error = "cancelled: step 'lint' failed"})
    assert.are.equal("⊘  c  cancelled: step 'lint' failed\n", out:text())
  end)

  it("joins lines split across chunks and prints an unfinished last line at the end", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = false, summary = false})
    local inst = {id = "s", status = "running", attempts = {{}}}
    local run = {instances = {inst}}
    obs:step_output(run, inst, "stdout", "abc")
    obs:step_output(run, inst, "stderr", "err\n")
    obs:step_output(run, inst, "stdout", "def\nxyz")
    inst.status, inst.duration = "success", 1
    obs:step_finished(run, inst)
    assert.are.same({"[s] err", "[s] abcdef", "[s] xyz", "✓  s  1.0s"}, plain_lines(out:text()))
  end)

  it("cleans escapes, tabs and control bytes from a many-line chunk, keeping empty lines", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = false, summary = false})
    local inst = {id = "100%", status = "running", attempts = {{}}}
    obs:step_output({instances = {inst}}, inst, "stdout",
      "\27[31mred\27[0m\tx\r\n\n\1bell\255\nplain\n")
    assert.are.same({"[100%] red  x", "[100%] ", "[100%] bell\u{FFFD}", "[100%] plain"},
      plain_lines(out:text()))
  end)

  it("does not hold a huge line without a newline in memory", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = false, summary = false})
    local inst = {id = "big"}
    for _ = 1, 20 do obs:step_output({}, inst, "stdout", string.rep("x", 8192)) end
    assert.is_true(#out:text() >= 128 * 1024)
    assert.is_true(#(obs.partial["big\0stdout"] or "") <= 64 * 1024)
  end)
end)

-- Waits until the live view redraws; fails after helpers' generous wait
-- (a redraw ends the wait at once) instead of hanging when the timer
-- never fires.
local function wait_for_redraw(obs)
  local before = obs.draws
  assert(helpers.wait_until(function() return obs.draws > before end), "the live view did not redraw")
end

describe("workflow progress, live view", function()
  local dir
  before_each(function() dir = helpers.tmpdir() end)
  after_each(function() helpers.rmtree(dir) end)

  local function start(obs, run, inst)
    inst.status, inst.started_at, inst.attempts = "running", core.time(), {{started_at = core.time()}}
    obs:step_started(run, inst, 1)
  end

  it("redraws only from its timer, at most once per interval, however much output arrives", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = true, width = 60, interval = 0.05, summary = false})
    local a, b = {id = "compile"}, {id = "test[shard=1]"}
    local run = {name = "t", started_at = core.time(), report_dir = dir, instances = {a, b}}
    finally(function() obs:run_finished(run) end)
    obs:run_started(run)
    start(obs, run, a)
    start(obs, run, b)
    local t0, chunks = core.now(), 0
    -- Bursts of output between loop turns: a burst never draws by itself;
    -- only the timer does, once per interval at most.
    local redrawn = helpers.wait_until(function()
      local draws = obs.draws
      for _ = 1, 100 do
        chunks = chunks + 1
        obs:step_output(run, a, "stdout", "\27[1mcompiling file_" .. chunks .. ".c\27[0m " .. string.rep("x", 80) .. "\n")
      end
      assert.are.equal(draws, obs.draws, "output drew the view itself")
      return obs.draws >= 3
    end)
    local elapsed = core.now() - t0
    assert.is_true(redrawn, "no redraws from the timer")
    assert.is_true(obs.draws <= elapsed / 0.05 + 2, obs.draws .. " redraws in " .. elapsed .. "s")
    assert.are.equal(obs.draws, select(2, out:text():gsub("\27%[J", "")) + 1)   -- the first draw erases nothing
  end)

  it("shows one line per running step with spinner, elapsed time and latest line, cut to the width", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = true, width = 50, interval = 0.02, summary = false})
    local a = {id = "compile"}
    local run = {name = "t", started_at = core.time(), report_dir = dir, instances = {a}}
    finally(function() obs:run_finished(run) end)
    obs:run_started(run)
    start(obs, run, a)
    obs:step_output(run, a, "stdout", "first\nlatest line " .. string.rep("y", 100) .. "\n\n")
    wait_for_redraw(obs)
    local last = out.parts[#out.parts]
    local block = helpers.lines(last:gsub("^\27%[%d+F\27%[J", ""))
    assert.are.equal(2, #block)   -- the step and the footer
    local line = text.strip_ansi(block[1])
    local spinner = line:match("^(%S+)  compile  %d+ms  latest line y+…$")   -- ids line up with finished lines
    assert.truthy(("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"):find(spinner, 1, true), line)
    assert.are.equal(49, utf8.len(line))
    assert.matches("1 running · 0 queued · 0/1 done", block[2])
  end)

  it("prints finished steps above the live block and stops its timer at the end", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = true, width = 80, interval = 0.02, summary = true})
    local a = {id = "unit"}
    local run = {name = "t", started_at = core.time(), report_dir = dir, instances = {a}}
    obs:run_started(run)
    start(obs, run, a)
    task.sleep(0.05)
    a.status, a.ended_at, a.duration, a.exit_code = "failed", core.time(), 0.05, 3
    a.error = "sh: false exited with 3\nmore"
    obs:step_finished(run, a)
    run.ended_at, run.result = core.time(), "failure"
    obs:run_finished(run)
    local s = out:text()
    assert.truthy(s:find("\27[31m✗\27[0m  unit  ", 1, true))
    assert.truthy(s:find("failed (exit 3): sh: false exited with 3\27[0m\n", 1, true))
    assert.truthy(s:find("   STEP", 1, true))
    assert.is_nil(obs.timer)
    local written = #out.parts
    task.sleep(0.1)
    assert.are.equal(written, #out.parts)
  end)

  it("keeps every line of the live block within the width, even for a very long id", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = true, width = 30, interval = 0.01})
    local a = {id = "step-with-a-very-long-name[" .. string.rep("k=v,", 10) .. "]"}
    local run = {name = "t", started_at = core.time(), report_dir = dir, instances = {a}}
    obs:run_started(run)
    start(obs, run, a)
    obs:step_log(run, a, "first\nsecond")
    wait_for_redraw(obs)
    for _, line in ipairs(helpers.lines(out.parts[#out.parts]:gsub("^\27%[%d+F\27%[J", ""))) do
      assert.is_true(utf8.len(text.strip_ansi(line)) <= 29, line)
    end
    obs:run_finished(run)
  end)

  it("folds many running steps into one line", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = true, width = 80, interval = 0.01, summary = false})
    local run = {name = "t", started_at = core.time(), report_dir = dir, instances = {}}
    obs:run_started(run)
    for i = 1, 20 do
      run.instances[i] = {id = "s" .. i}
      start(obs, run, run.instances[i])
    end
    wait_for_redraw(obs)
    assert.truthy(out.parts[#out.parts]:find("… and 8 more", 1, true))
    obs:run_finished(run)
  end)
end)

describe("workflow progress, choosing the view", function()
  local script
  before_each(function()
    script = os.tmpname()
    helpers.write(script, string.format([[
      local fixture = dofile(%q)
      fixture.play("/tmp", {require("smol.workflow.progress").new()})
    ]], fixtures .. "workflow_run.lua"))
  end)
  after_each(function() os.remove(script) end)

  -- Runs the script in a pseudo-terminal (util-linux `script`), with env prefix.
  local function in_terminal(env)
    local cmd = string.format("%s script -qec %q /dev/null", env,
      string.format("%q %q", core.exe_path(), script))
    local p = io.popen(cmd)
    local s = p:read("a")
    p:close()
    return s
  end

  it("gives summary options to match stdout: plain and uncut through a pipe", function()
    local probe = os.tmpname()
    finally(function() os.remove(probe) end)
    helpers.write(probe, [[
      local o = require("smol.workflow.progress").summary_options()
      print(tostring(o.color) .. " " .. tostring(o.width))
    ]])
    local p = io.popen(string.format("%q %q", core.exe_path(), probe))
    assert.are.equal("false nil", p:read("l"))
    p:close()
    if not helpers.which("script") then return end
    p = io.popen(string.format("TERM=xterm COLUMNS=77 script -qec %q /dev/null",
      string.format("stty cols 64; %q %q", core.exe_path(), probe)))
    assert.are.equal("true 63", (p:read("a"):gsub("\r", ""):match("(%S+ %S+)\n?$")))
    p:close()
  end)

  it("asks the terminal without forking; a terminal without a size means $COLUMNS", function()
    if not helpers.which("script") then pending("util-linux `script` not installed"); return end
    local probe = os.tmpname()
    finally(function() os.remove(probe) end)
    helpers.write(probe, [[
      local function no_fork() error("forked a helper program", 2) end
      io.popen, os.execute = no_fork, no_fork
      local progress = require "smol.workflow.progress"
      print("tty=" .. tostring(progress.stdout_is_terminal()) .. " cols=" .. progress.terminal_width())
    ]])
    local p = io.popen(string.format("COLUMNS=77 script -qec %q /dev/null 2>&1",
      string.format("stty cols 0 rows 0; %q %q", core.exe_path(), probe)))
    local out = p:read("a"):gsub("\r", "")
    p:close()
    assert.matches("tty=true cols=77\n?$", out)
  end)

  it("prints plain lines when stdout is not a terminal", function()
    local p = io.popen(string.format("%q %q", core.exe_path(), script))
    local s = p:read("a")
    p:close()
    assert.truthy(s:find("\n[deps] fetching deps\n", 1, true))
    assert.is_nil(s:find("\27", 1, true))
  end)

  it("draws the live view in a terminal, without colours under NO_COLOR", function()
    if not helpers.which("script") then pending("util-linux `script` not installed"); return end
    local live = in_terminal("TERM=xterm")
    assert.truthy(live:find("\27[32m✓\27[0m  deps", 1, true), live)
    assert.is_nil(live:find("[deps] fetching deps", 1, true))
    local uncoloured = in_terminal("TERM=xterm NO_COLOR=1")
    assert.truthy(uncoloured:find("✓  deps  390ms", 1, true), uncoloured)
    assert.is_nil(uncoloured:find("[deps] fetching deps", 1, true), "NO_COLOR switched the live view off")
    assert.is_nil(uncoloured:find("\27%[[%d;]*m"), "no SGR colour")
    local dumb = in_terminal("TERM=dumb")
    assert.truthy(dumb:find("[deps] fetching deps", 1, true), dumb)
  end)
end)
