-- The end-of-run summary table (smol.workflow.summary) and the text
-- helpers it shares with the progress view and reports (smol.workflow.text).
local summary = require "smol.workflow.summary"
local text = require "smol.workflow.text"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")

describe("workflow text helpers", function()
  it("formats durations for people", function()
    assert.are.equal("0ms", text.duration(0))
    assert.are.equal("850ms", text.duration(0.85))
    assert.are.equal("12.3s", text.duration(12.34))
    assert.are.equal("2m05s", text.duration(125))
    assert.are.equal("1h02m", text.duration(3725))
    assert.are.equal("-", text.duration(nil))
  end)

  it("replaces invalid UTF-8 bytes and keeps valid text", function()
    assert.are.equal("a\u{FFFD}b\u{FFFD}\u{FFFD}é", text.valid_utf8("a\xffb\xc0\x80é"))
    assert.are.equal("déjà vu", text.valid_utf8("déjà vu"))
  end)

  it("makes program output safe for our terminal layout", function()
    local line = text.terminal_line("\27[31mred\27[0m\tok\r\27]0;title\7 \1done\127")
    assert.are.equal("red  ok done", line)
    assert.is_nil(line:find("[%c]"))
    assert.are.same({"ab", "ab", "plain text"},
      {text.terminal_line("a\nb"), text.terminal_line("a\0b"), text.terminal_line("plain text")})
  end)

  it("cleans each kind of text the same way: escapes, controls, invalid bytes", function()
    local raw = "\27[1;31mred\27[0m\tx\r\n\27]8;;http://a\27\\link\27]8;;\27\\\27M\1\255\xe2\x82 é"
    assert.are.same({"red  xlink\u{FFFD}\u{FFFD}\u{FFFD} é", "red  x\nlink\u{FFFD}\u{FFFD}\u{FFFD} é",
      "red\tx\r\nlink\u{FFFD}\u{FFFD}\u{FFFD} é"},
      {text.terminal_line(raw), text.terminal_lines(raw), text.printable(raw)})
    assert.are.same({"", "", "a\27b"}, {text.terminal_line("\27"), text.terminal_lines("\27["), text.valid_utf8("a\27b")})
    local clean = string.rep("plain déjà vu\n", 100)
    assert.are.equal(clean, text.terminal_lines(clean))
  end)

  it("cleans binary output in a handful of Lua instructions, whatever its size", function()
    -- Binary output is invalid UTF-8 every few bytes: a repair loop in Lua
    -- ran per bad byte (4 MB/s). Counted in VM instructions, not time.
    math.randomseed(11)
    local bytes = {}
    for i = 1, 1 << 20 do bytes[i] = string.char(math.random(0, 255)) end
    local binary = table.concat(bytes)
    local counts = {}
    for _, f in ipairs{"valid_utf8", "terminal_line", "terminal_lines", "printable"} do
      local n = 0
      debug.sethook(function() n = n + 1 end, "", 1)
      local out = text[f](binary)
      debug.sethook()
      assert.is_truthy(utf8.len(out))
      counts[#counts + 1] = n < 100 and "few" or (f .. ": " .. n)
    end
    assert.are.same({"few", "few", "few", "few"}, counts)
  end)

  it("truncates by characters, marking the cut", function()
    assert.are.equal("héllo", text.truncate("héllo", 5))
    assert.are.equal("hél…", text.truncate("héllo", 4))
    assert.are.equal(4, utf8.len(text.truncate("✓✓✓✓✓✓", 4)))
  end)

  it("truncates coloured lines by what shows, ending the colour", function()
    local line = "\27[31m✗\27[0m  build  " .. string.rep("x", 50)
    local cut = text.truncate_styled(line, 20)
    assert.are.equal(20, utf8.len(text.strip_ansi(cut)))
    assert.truthy(cut:find("^\27%[31m✗\27%[0m  build  x+…\27%[0m$"))
    assert.are.equal("short", text.truncate_styled("short", 20))
  end)

  it("drops a status word the message already starts with", function()
    assert.are.equal("step 'lint' failed", text.strip_status("cancelled", "cancelled: step 'lint' failed"))
    assert.are.equal("after 2s", text.strip_status("timed_out", "timed out: after 2s"))
    assert.are.equal("exit 2", text.strip_status("failed", "exit 2"))
  end)

  it("escapes XML text and attributes", function()
    assert.are.equal("a &lt;b&gt; &amp; \"c\"", text.xml_escape('a <b> & "c"'))
    assert.are.equal("&quot;x&quot;&#10;&lt;", text.xml_escape('"x"\n<', true))
    assert.are.equal("bell", text.xml_escape("be\7ll\27[1m"))
  end)

  it("keeps the last n lines", function()
    assert.are.equal("c\nd", text.last_lines("a\nb\nc\nd\n", 2))
    assert.are.equal("a", text.last_lines("a", 5))
  end)
end)

-- Not cut to any width (the default fits the terminal when stdout is one).
local PLAIN = {width = false}

describe("workflow summary", function()
  local dir
  before_each(function() dir = helpers.tmpdir() end)
  after_each(function() helpers.rmtree(dir) end)

  it("has one row per instance with mark, status, duration, attempts, exit code and note", function()
    local run = workflow_run.play(dir, {})
    local lines = helpers.lines(summary.render(run, PLAIN))
    assert.matches("STEP%s+STATUS%s+TIME%s+TRIES%s+EXIT%s+NOTE", lines[1])
    assert.matches("^✓  deps%s+ok%s+390ms%s+1%s+0$", lines[2])
    assert.matches("^✓  build%s+ok%s+1%.9s%s+2%s+0$", lines[3])
    assert.matches("^✗  test%[shard=2%]%s+failed%s+880ms%s+1%s+2  sh: make test SHARD=2 exited with 2$", lines[5])
    assert.matches("^⏱  test%[shard=3%]%s+timed out%s+2%.0s%s+1%s+137  timed out after 2s$", lines[6])
    assert.matches("^↷  package%s+skipped%s+%-%s+0%s+%-  needs failed", lines[8])
    assert.are.equal(9 + 3, #lines)
  end)

  it("ends with the result, counts and the report directory", function()
    local run = workflow_run.play(dir, {})
    local out = summary.render(run, PLAIN)
    assert.truthy(out:find("ci failure in 4.8s — 8 steps: 4 ok, 2 failed, 1 timed out, 1 skipped\n", 1, true))
    assert.truthy(out:find("report: " .. dir .. "\n", 1, true))
  end)

  it("shows only the first line of a multi-line error", function()
    local out = summary.render(workflow_run.play(dir, {}), PLAIN)
    assert.is_nil(out:find("last stderr", 1, true))
  end)

  it("without a width, gives the whole line of an error its note cut, below the row", function()
    local long = "failed to start provider `/nonexistent/provider`: not_found: cannot run provider"
      .. " `/nonexistent/provider`: no such file or directory"
    local run = {name = "t", result = "failure", instances = {
      {id = "a", status = "failed", error = long .. "\nsecond line", attempts = {{}}, duration = 0.01},
      {id = "b", status = "failed", error = "short", attempts = {{}}, duration = 0.01}}}
    local lines = helpers.lines(summary.render(run, PLAIN))
    assert.matches("^✗  a%s.*  failed to start provider .*…$", lines[2])
    assert.are.equal("   │ " .. long, lines[3])
    assert.matches("^✗  b%s.*  short$", lines[4])
  end)

  it("colours only when asked", function()
    local run = workflow_run.play(dir, {})
    assert.is_nil(summary.render(run, PLAIN):find("\27", 1, true))
    local coloured = summary.render(run, {color = true})
    assert.truthy(coloured:find("\27[31m✗\27[0m", 1, true))
    assert.truthy(coloured:find("\27[32m✓\27[0m", 1, true))
  end)

  it("fits every line in the given width", function()
    local run = workflow_run.play(dir, {})
    for _, line in ipairs(helpers.lines(summary.render(run, {width = 40}))) do
      if not line:find("^report:") and not line:find("^ci ") then
        assert.is_true(utf8.len(line) <= 40, line)
      end
    end
  end)

  it("fits a 50-column terminal: every column stays, long notes wrap in the note column", function()
    local run = workflow_run.play(dir, {})
    local lines = helpers.lines(summary.render(run, {width = 50}))
    for _, line in ipairs(lines) do
      if not line:find("^report:") then assert.is_true(utf8.len(line) <= 50, line) end
    end
    -- 47 columns before the note: notes go on their own lines, under the step.
    assert.matches("STEP%s+STATUS%s+TIME%s+TRIES%s+EXIT$", lines[1])
    assert.matches("^✗  test%[shard=2%]%s+failed%s+880ms%s+1%s+2$", lines[5])
    assert.are.equal("   sh: make test SHARD=2 exited with 2", lines[6])
    -- With room beside the columns, a long note wraps in its own column.
    local wide = helpers.lines(summary.render(run, {width = 70}))
    local note_col = utf8.len(wide[1]:match("^(.-)NOTE$"))
    assert.matches("^✗  test%[shard=2%]%s+failed%s+880ms%s+1%s+2  sh: make test SHARD=2$", wide[5])
    assert.are.equal(string.rep(" ", note_col) .. "exited with 2", wide[6])
    for _, line in ipairs(wide) do
      if not line:find("^report:") then assert.is_true(utf8.len(line) <= 70, line) end
    end
    assert.truthy(summary.render(run, {width = 50}):find("ci failure in 4.8s — 8 steps: 4 ok, 2 failed, 1\ntimed out, 1 skipped\n", 1, true))
  end)

  it("cuts long ids in the middle and puts notes below when the columns leave no room", function()
    local long = {id = "integration-tests[os=debian-12,arch=arm64,db=postgres]", step = "t", status = "failed",
                  duration = 1, attempts = {{}}, exit_code = 2, error = "sh: run-tests exited with 2"}
    local lines = helpers.lines(summary.render({name = "w", result = "failure", instances = {long}}, {width = 50}))
    for _, line in ipairs(lines) do assert.is_true(utf8.len(line) <= 50, line) end
    assert.matches("^✗  integrati…=postgres%]  failed  1%.0s      1     2$", lines[2])
    assert.are.equal("   sh: run-tests exited with 2", lines[3])
    long.error = string.rep("word ", 200)
    lines = helpers.lines(summary.render({name = "w", result = "failure", instances = {long}}, {width = 50}))
    assert.are.equal(2 + 3 + 2, #lines)   -- header, row, 3 note lines, blank, result (no report dir)
    assert.matches("[^…]…$", lines[5])
    long.error = string.rep("x", 400)     -- no space to wrap at: cut lines, one ellipsis
    lines = helpers.lines(summary.render({name = "w", result = "failure", instances = {long}}, {width = 50}))
    assert.are.equal("   " .. string.rep("x", 46) .. "…", lines[5])
  end)

  it("says 1 step, not 1 steps", function()
    local one = {id = "a", step = "a", status = "success", duration = 1, attempts = {{}}}
    assert.truthy(summary.render({name = "w", result = "success", instances = {one}}, PLAIN):find("— 1 step: 1 ok", 1, true))
  end)

  it("renders an empty run", function()
    local out = summary.render({name = "empty", result = "success", instances = {}}, PLAIN)
    assert.truthy(out:find("empty success in - — 0 steps: \n", 1, true))
  end)
end)
