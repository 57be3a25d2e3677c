-- The progress view (smol.workflow.progress), more terminal details: the
-- header's wording, and the live view when Ctrl-C ends a real run in a
-- pseudo-terminal: the last redraw must erase the whole live block. The pty's
-- output is replayed through a small terminal model (cursor moves and
-- erases) to see what stays on the screen.
local core = require "smol.core"
local progress = require "smol.workflow.progress"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")

local SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

-- The screen a terminal shows after `bytes`: only what the live view and
-- the host write (text, CR, LF, "ESC[nF" line up, "ESC[J" erase below, SGR
-- colours, which are dropped). Lines are lists of characters.
local function screen_of(bytes)
  local lines, row, col = {{}}, 1, 1
  local at = 1
  while at <= #bytes do
    local n, final, next_at = bytes:match("^\27%[([%d;]*)([A-Za-z])()", at)
    if final == "F" then row, col = math.max(row - (tonumber(n) or 1), 1), 1
    elseif final == "J" then
      for i = #lines, row + 1, -1 do lines[i] = nil end
      for i = #lines[row], col, -1 do lines[row][i] = nil end
    elseif not final then
      local ch = bytes:sub(at, (utf8.offset(bytes, 2, at) or #bytes + 1) - 1)
      next_at = at + #ch
      if ch == "\r" then col = 1
      elseif ch == "\n" then row = row + 1; lines[row] = lines[row] or {}
      else lines[row][col], col = ch, col + 1 end
    end
    at = next_at
  end
  local out = {}
  for i, line in ipairs(lines) do out[i] = table.concat(line) end
  return out
end

local WORKFLOW = [[
local wf = require "smol.workflow"
return wf.define{name = "cut", sandbox = {}, steps = {
  {name = "alpha", run = function(ctx) ctx:sh("echo alpha-started; sleep 30") end},
  {name = "beta", run = function(ctx) ctx:sh("echo beta-started; sleep 30") end},
  {name = "quick", run = function(ctx) ctx:sh("true") end},
}}
]]

describe("workflow progress, header", function()
  it("says 1 step, not 1 steps", function()
    local out = helpers.sink()
    progress.new({out = out, live = false}):run_started({name = "w", jobs = 2, report_dir = "r", instances = {{id = "a"}}})
    assert.are.equal("w: 1 step, jobs 2, report in r\n", out:text())
  end)
end)

describe("workflow progress, live view with long ids", function()
  it("cuts ids in the middle, so steps sharing a long prefix stay told apart", function()
    local out = helpers.sink()
    local obs = progress.new({out = out, live = true, color = false, width = 50, interval = 0.01})
    local run = {name = "t", started_at = core.time(), instances = {}}
    obs:run_started(run)
    for i, variant in ipairs({"postgres", "sqlite"}) do
      local inst = {id = "integration-tests-for-the-storage-backend[variant=" .. variant .. "]",
                    status = "success", started_at = core.time(), duration = 0.5, attempts = {{}}}
      run.instances[i] = inst
      obs:step_finished(run, inst)
    end
    run.result = "success"
    obs:run_finished(run)
    local lines = helpers.lines(out:text())
    assert.matches("^✓  integration…nt=postgres%]  500ms$", lines[1])
    assert.matches("^✓  integration…iant=sqlite%]  500ms$", lines[2])
  end)
end)

describe("workflow summary in a terminal", function()
  it("fits the terminal's width when the caller gives none (as `smolwf run` does)", function()
    if not helpers.which("script") then pending("util-linux `script` not installed"); return end
    local dir = helpers.tmpdir()
    finally(function() helpers.rmtree(dir) end)
    helpers.write(dir .. "/show.lua", string.format([[
      local run = dofile(%q).play(%q, {})
      io.stdout:write(require("smol.workflow.summary").render(run, {}))
    ]], fixtures .. "workflow_run.lua", dir))
    -- A fresh pty has no size: the terminal's width then comes from $COLUMNS.
    local p = io.popen(string.format("COLUMNS=50 script -qec %q /dev/null", string.format("%q %q", core.exe_path(), dir .. "/show.lua")))
    local out = p:read("a"):gsub("\r", "")
    p:close()
    local lines = helpers.lines(out)
    assert.matches("STEP%s+STATUS%s+TIME%s+TRIES%s+EXIT", lines[1])
    for _, line in ipairs(lines) do
      if not line:find("^report:") then assert.is_true(utf8.len(line) < 50, line) end
    end
  end)
end)

describe("workflow progress, live view interrupted by Ctrl-C in a terminal", function()
  local dir
  before_each(function() dir = helpers.tmpdir() end)
  after_each(function() helpers.rmtree(dir) end)

  -- Runs the workflow in a pty with `script`, presses Ctrl-C once the live
  -- view shows both long steps and the quick one finished; returns the
  -- exit status and the bytes the terminal got. stderr_to: a redirection
  -- of smolwf's stderr inside the pty ("" keeps it on the terminal).
  local function interrupt_in_terminal(stderr_to)
    assert(require("lfs").mkdir(dir .. "/work"))
    helpers.write(dir .. "/cut.lua", WORKFLOW)
    local tty_out = dir .. "/tty.out"
    -- Bytes written to `script`'s stdin reach the pty: "\3" is Ctrl-C there.
    local cmd = string.format("cd %q && env -u NO_COLOR TERM=xterm COLUMNS=100 script -qec %q /dev/null > %q",
      dir .. "/work", string.format("%q run --report-dir %q %q %s", core.exe_path(), dir .. "/report",
        dir .. "/cut.lua", stderr_to), tty_out)
    local keyboard = io.popen(cmd, "w")
    local function shown(s)
      local f = io.open(tty_out, "rb")
      local data = f and f:read("a") or ""
      if f then f:close() end
      return data:find(s, 1, true) ~= nil
    end
    local live = helpers.wait_until(function()
      return shown("alpha-started") and shown("beta-started") and shown("\27[32m✓\27[0m  quick")
    end, 20)
    keyboard:write("\3")
    keyboard:flush()
    local _, _, status = keyboard:close()
    local bytes = helpers.read(tty_out)
    assert.is_true(live, "the live view never showed the steps:\n" .. bytes)
    return status, bytes
  end

  -- Checks what stays on the screen: no live line, every finished line.
  local function assert_clean_screen(bytes)
    local screen = screen_of(bytes)
    local all = table.concat(screen, "\n")
    for _, line in ipairs(screen) do
      for _, code in utf8.codes(SPINNER) do
        assert.is_nil(line:find(utf8.char(code), 1, true), "stale live line: " .. line .. "\n" .. all)
      end
      assert.is_nil(line:find("running ·", 1, true), "stale footer: " .. line .. "\n" .. all)
    end
    -- The finished lines ("✓  quick  37ms"), not the summary's rows ("✓  quick  ok").
    for _, wanted in ipairs({"\n✓  quick  %d", "\n⊘  alpha  %d", "\n⊘  beta  %d", "\ncut cancelled in"}) do
      assert.truthy(("\n" .. all):find(wanted), wanted .. " is gone:\n" .. all)
    end
  end

  it("erases the whole live block and says what the interrupt does", function()
    if not helpers.which("script") then pending("util-linux `script` not installed"); return end
    local status, bytes = interrupt_in_terminal("")
    assert.are.equal(130, status, bytes)
    -- The run handles Ctrl-C itself: no "smolwf: interrupted" from the host below the block.
    assert.is_nil(bytes:find("smolwf: interrupted", 1, true), bytes)
    assert.truthy(table.concat(screen_of(bytes), "\n"):find("\n⚠ interrupted: stopping the running steps", 1, true), bytes)
    assert_clean_screen(bytes)
    assert.are.same({}, helpers.processes_matching(dir))
  end)

  it("erases no more than the live block when stderr is not the terminal", function()
    if not helpers.which("script") then pending("util-linux `script` not installed"); return end
    local status, bytes = interrupt_in_terminal("2>/dev/null")
    assert.are.equal(130, status, bytes)
    assert.is_nil(bytes:find("smolwf: interrupted", 1, true))
    assert_clean_screen(bytes)
    assert.are.same({}, helpers.processes_matching(dir))
  end)
end)
