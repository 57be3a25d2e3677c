-- Workflow observer showing a run to a person.
--
-- Live view (stdout is a terminal whose TERM is not "dumb"): finished steps
-- are printed once, with a mark, duration and attempts; below them one
-- line per running step (spinner, elapsed time, its latest output line,
-- cut to the terminal width) and a footer with the counts. That block is
-- redrawn with ANSI cursor moves from a core.timer tick, at most 1/interval
-- times a second (10/s by default), never from an output event: a step
-- printing megabytes costs one string match per chunk, not a redraw.
--
-- Plain view (not a terminal, or TERM=dumb; CI logs): one line per
-- event or output line, prefixed with the step id ("[build] make: ...").
--
-- NO_COLOR (https://no-color.org) only drops the colours, in both views and
-- the summary: the live view itself is not colour.
--
-- With opts.summary, both print the summary table (smol.workflow.summary)
-- when the run ends; `smolwf run` prints it itself by default.
local core = require "smol.core"
local text = require "smol.workflow.text"
local summary = require "smol.workflow.summary"
local pool_view = require "smol.workflow.pool_view"

local M = {}

local SPINNER = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
-- A partial output line longer than this is printed without waiting for its newline.
local MAX_PARTIAL = 64 * 1024
-- How much of a chunk's end we search for its latest line (see latest_line).
local TAIL_SCAN = 4096
-- Live lines shown at most; more running steps are folded into "... and N more".
local MAX_LIVE = 12
-- Lines of a failed step's stderr shown under it.
M.STDERR_LINES = 8

--- Whether stdout is a terminal (asked of the kernel: no fork, no guess
--- from the environment).
function M.stdout_is_terminal()
  return core.isatty(1)
end

--- Terminal columns: the terminal's own size, else $COLUMNS (a terminal
--- that reports none, as a fresh pty), else 80.
function M.terminal_width()
  local w = core.term_width()
  if not w or w <= 0 then w = tonumber(os.getenv("COLUMNS")) end
  return w or 80
end

--- Whether NO_COLOR is set (to anything but ""), as no-color.org asks.
function M.no_color()
  local v = os.getenv("NO_COLOR")
  return v ~= nil and v ~= ""
end

--- Options for summary.render matching where stdout goes: the terminal's
--- width in a terminal (colours unless NO_COLOR), plain and uncut otherwise.
function M.summary_options()
  if os.getenv("TERM") == "dumb" or not M.stdout_is_terminal() then
    return {color = false}
  end
  return {color = not M.no_color(), width = M.terminal_width() - 1}
end

-- The terminal width, asked again at most once a second (a resize shows
-- within a second).
local function cached_terminal_width(clock)
  local width, asked_at = nil, -math.huge
  return function()
    local now = clock()
    if now - asked_at >= 1 then width, asked_at = M.terminal_width(), now end
    return width
  end
end

--- The latest non-empty line of a chunk, made safe for the terminal; nil if none.
--- Only the chunk's end is searched: an anchored-at-end pattern over a huge
--- chunk without newlines would be quadratic.
function M.latest_line(chunk)
  local tail = #chunk > TAIL_SCAN and chunk:sub(-TAIL_SCAN) or chunk
  local line = nil
  for piece in tail:gmatch("[^\r\n]+") do
    if piece:find("%S") then line = piece end
  end
  return line and text.terminal_line(line)
end

-- "failed (exit 2): first line of the error".
local function note_of(inst)
  local word = text.word(inst.status)
  local note = word
  if inst.exit_code and inst.exit_code ~= 0 then note = note .. " (exit " .. inst.exit_code .. ")" end
  if inst.error == nil then return note end
  local msg = text.strip_status(inst.status, text.terminal_line(tostring(inst.error):match("^[^\n]*")))
  if msg == "" then return note end
  -- "timed out after 1s" says it already; "timed out: timed out after 1s" would stutter.
  if msg:sub(1, #word) == word and note == word then return msg end
  return note .. ": " .. msg
end

-- The id as shown in the live view: at most max_id characters, cut in
-- the middle so that long ids sharing a prefix stay told apart.
local function shown_id(inst, max_id)
  local id = text.terminal_line(tostring(inst.id))
  return max_id and text.truncate_middle(id, max_id) or id
end

-- The finished line of an instance, shared by both views:
-- "✗ test[shard=2]  880ms  2 attempts  exit 2: message".
local function finished_line(inst, color, max_id)
  local parts = {text.paint(text.mark(inst.status), text.sgr[inst.status], color), shown_id(inst, max_id)}
  if text.ran(inst) then parts[#parts + 1] = text.duration(inst.duration) end
  local reused = text.reuse_label(inst)
  if reused then parts[#parts + 1] = text.paint(reused, "2", color) end
  local tries = text.attempts_label(inst)
  if tries ~= "" then parts[#parts + 1] = tries end
  if inst.status ~= "success" then parts[#parts + 1] = text.paint(note_of(inst), text.sgr[inst.status], color) end
  return table.concat(parts, "  ")
end
M.finished_line = finished_line

-- ===== Plain view ==========================================================

local Plain = {}
Plain.__index = Plain

-- "[id] ", cleaned once per instance: it prefixes every line of its output.
function Plain:prefix(inst)
  local p = self.prefixes[inst]
  if not p then
    p = "[" .. text.terminal_line(tostring(inst.id)) .. "] "
    self.prefixes[inst] = p
  end
  return p
end

function Plain:line(inst, s)
  self.out:write(self:prefix(inst), s, "\n")
end

function Plain:run_started(run)
  local n = #(run.instances or {})
  self.out:write(string.format("%s: %d %s, jobs %s, report in %s\n", tostring(run.name or "workflow"),
    n, n == 1 and "step" or "steps", tostring(run.jobs or "-"), tostring(run.report_dir or "-")))
  self.out:flush()
end

function Plain:step_started(_, inst, attempt_no)
  self:line(inst, (attempt_no or 1) > 1 and ("started attempt " .. attempt_no) or "started")
  self.out:flush()
end

-- Prints the complete lines of a stream and keeps the unfinished rest.
-- Lines are matched only up to the last newline: "([^\n]*)\n" tried at
-- every position of a long newline-free tail would be quadratic.
function Plain:step_output(_, inst, stream, chunk)
  local key = tostring(inst.id) .. "\0" .. stream
  local buf = (self.partial[key] or "") .. chunk
  local last_nl = chunk:find("\n", 1, true) and buf:match(".*()\n") or 0
  if last_nl > 0 then
    local prefix = self:prefix(inst):gsub("%%", "%%%%")
    self.out:write((text.terminal_lines(buf:sub(1, last_nl)):gsub("[^\n]*\n", prefix .. "%0")))
  end
  local rest = buf:sub(last_nl + 1)
  if #rest > MAX_PARTIAL then self:line(inst, text.terminal_line(rest)); rest = "" end
  self.partial[key] = rest ~= "" and rest or nil
  self.out:flush()
end

function Plain:flush_partial(inst)
  for _, stream in ipairs({"stdout", "stderr"}) do
    local key = tostring(inst.id) .. "\0" .. stream
    if self.partial[key] then self:line(inst, text.terminal_line(self.partial[key])) end
    self.partial[key] = nil
  end
end

function Plain:step_log(_, inst, message)
  for line in (tostring(message) .. "\n"):gmatch("([^\n]*)\n") do
    self:line(inst, text.terminal_line(line))
  end
  self.out:flush()
end

-- A long sandbox open: "opening the sandbox (copy): 1200 files, 35.2 MB".
local function progress_line(ev)
  local files, bytes = tonumber(ev.files) or 0, tonumber(ev.bytes) or 0
  return ("opening the sandbox (%s): %s, %.1f MB"):format(text.terminal_line(tostring(ev.phase or "open")),
    text.plural(math.floor(files), "file"), bytes / 1e6)
end

function Plain:step_progress(_, inst, ev)
  self:line(inst, progress_line(ev))
end

function Plain:step_retry(_, inst, attempt_no, delay, err)
  local _ = attempt_no
  self:line(inst, string.format("retrying in %s: %s", text.duration(delay or 0),
    text.terminal_line(tostring(err):match("^[^\n]*"))))
  self.out:flush()
end

function Plain:pool_started(_, providers)
  self.out:write(pool_view.started(providers), "\n")
  self.out:flush()
end

function Plain:pool_changed(_, what, provider)
  if what ~= "lost" then return end
  self.out:write(pool_view.lost(provider), "\n")
  self.out:flush()
end

function Plain:step_placed(_, inst, placement)
  self:line(inst, pool_view.placed(placement))
end

function Plain:step_moved(_, inst, why)
  self:line(inst, pool_view.moved(why))
  self.out:flush()
end

-- "interrupted: running the `always` steps (up to 30s; Ctrl-C again skips them)".
local function interrupted_line(signal, grace)
  local what = signal == "INT" and "interrupted" or ("interrupted by SIG" .. tostring(signal))
  if not grace then return what .. ": stopping the running steps" end
  return string.format("%s: stopping the running steps, then the `always` steps get up to %gs (Ctrl-C again skips them)",
    what, grace)
end

function Plain:run_interrupted(_, signal, grace)
  self.out:write(interrupted_line(signal, grace), "\n")
  self.out:flush()
end

function Plain:step_finished(_, inst)
  self:flush_partial(inst)
  self.out:write(finished_line(inst, false), "\n")
  self.out:flush()
end

-- Ends with a blank line, setting off what follows (the summary table).
function Plain:run_finished(run)
  for _, inst in ipairs(run.instances or {}) do self:flush_partial(inst) end
  self.out:write("\n")
  if self.summary then self.out:write(summary.render(run, {color = false})) end
  self.out:flush()
end

-- ===== Live view ===========================================================

local Live = {}
Live.__index = Live

function Live:run_started(run)
  self.run = run
end

function Live:step_started(_, inst, attempt_no)
  if not self.state[inst] then
    self.running[#self.running + 1] = inst
    self.state[inst] = {}
  end
  self.state[inst].attempt = attempt_no or 1
  self.state[inst].note = nil
  self:ensure_ticking()
end

function Live:step_output(_, inst, _, chunk)
  local st = self.state[inst]
  local line = st and M.latest_line(chunk)
  if line then st.line, st.note = line, nil end
end

function Live:step_log(_, inst, message)
  local st = self.state[inst]
  local line = st and M.latest_line(tostring(message))
  if line then st.line = line end
end

function Live:step_progress(_, inst, ev)
  local st = self.state[inst]
  if st then st.line = progress_line(ev) end
end

function Live:step_retry(_, inst, attempt_no, delay, err)
  local st = self.state[inst]
  local _ = attempt_no
  if st then
    st.note = string.format("retry in %s after: %s", text.duration(delay or 0),
      text.terminal_line(tostring(err):match("^[^\n]*")))
  end
end

function Live:step_finished(_, inst)
  for i, r in ipairs(self.running) do
    if r == inst then table.remove(self.running, i); break end
  end
  self.state[inst] = nil
  -- Cut to the width: a wrapped line would scroll the live block apart.
  local width = math.max(self.width() - 1, 20)
  self.finished[#self.finished + 1] = text.truncate_styled(finished_line(inst, self.color, width // 2), width)
  for _, line in ipairs(text.failure_details(inst, M.STDERR_LINES)) do
    for _, part in ipairs(text.wrap(line, width - 5)) do
      self.finished[#self.finished + 1] = "   " .. text.paint("│ " .. part, "2", self.color)
    end
  end
end

function Live:pool_changed(_, what, provider)
  if what == "lost" then self.finished[#self.finished + 1] = text.paint("⚠ " .. pool_view.lost(provider), "33", self.color) end
end

function Live:step_moved(_, inst, why)
  local st = self.state[inst]
  if st then st.note = pool_view.moved(why) end
end

function Live:run_interrupted(_, signal, grace)
  self.finished[#self.finished + 1] = text.paint("⚠ " .. interrupted_line(signal, grace), "33", self.color)
  self:draw()
end

function Live:ensure_ticking()
  if self.timer or self.closed then return end
  self.timer = self.new_timer(self.interval, function() self:tick() end)
end

-- One timer tick: redraw, and keep ticking while steps are running (the
-- spinner and elapsed times move even when no event arrives).
function Live:tick()
  self.timer = nil
  if self.closed then return end
  self:draw()
  if #self.running > 0 then self:ensure_ticking() end
end

function Live:live_line(inst, now, frame, width)
  local st = self.state[inst]
  local elapsed = inst.started_at and now - inst.started_at
  -- Two spaces after the spinner, as after a finished line's mark: the ids line up.
  local head = string.format("%s  %s  %s", text.paint(SPINNER[frame], "36", self.color),
    shown_id(inst, width // 2), text.duration(elapsed))
  local where = pool_view.tag(inst, self.run and self.run.pool)
  if where then head = head .. "  " .. text.paint(text.terminal_line(where), "2", self.color) end
  if st.attempt > 1 then head = head .. "  attempt " .. st.attempt end
  local tail = st.note or st.line
  local plain_width = text.width(text.strip_ansi(head))
  if not tail or plain_width + 4 >= width then return head end
  return head .. "  " .. text.paint(text.truncate(tail, width - plain_width - 2), "2", self.color)
end

local FINAL = {success = true, failed = true, skipped = true, cancelled = true, timed_out = true}

function Live:footer(now)
  local counts = {queued = 0, done = 0}
  local instances = self.run and self.run.instances or {}
  for _, inst in ipairs(instances) do
    if inst.status == "queued" then counts.queued = counts.queued + 1
    elseif FINAL[inst.status] then counts.done = counts.done + 1 end
  end
  local elapsed = self.run and self.run.started_at and now - self.run.started_at
  return text.paint(string.format("  %d running · %d queued · %d/%d done · %s", #self.running,
    counts.queued, counts.done, #instances, text.duration(elapsed)), "2", self.color)
end

-- The live block: one line per running step (at most MAX_LIVE), then the footer.
function Live:live_block(width)
  local now = self.clock()
  local frame = math.floor(now / self.interval) % #SPINNER + 1
  local lines = {}
  for i, inst in ipairs(self.running) do
    if i > MAX_LIVE then
      lines[#lines + 1] = string.format("  … and %d more", #self.running - MAX_LIVE)
      break
    end
    lines[#lines + 1] = self:live_line(inst, now, frame, width)
  end
  lines[#lines + 1] = self:footer(now)
  local pool = self.run and self.run.pool
  if pool then lines[#lines + 1] = text.paint("  " .. pool_view.line(pool.providers), "2", self.color) end
  -- A long id or a narrow terminal must not make a line wrap either.
  for i, line in ipairs(lines) do lines[i] = text.truncate_styled(line, width) end
  return lines
end

-- Erases the previous live block, prints the finished lines (they stay),
-- then the new live block; one write, so the terminal never shows half.
function Live:draw(final)
  local width = math.max(self.width() - 1, 20)   -- a full-width line would wrap on some terminals
  local out = {}
  local up = self.drawn + (final and self.stray_lines or 0)
  if up > 0 then out[#out + 1] = string.format("\27[%dF\27[J", up) end
  for _, line in ipairs(self.finished) do out[#out + 1] = line .. "\n" end
  self.finished = {}
  local block = final and {} or self:live_block(width)
  for _, line in ipairs(block) do out[#out + 1] = line .. "\n" end
  self.drawn = #block
  self.draws = self.draws + 1
  self.out:write(table.concat(out))
  self.out:flush()
end

--- How many lines someone else wrote below the live block before an
--- interrupted run's final redraw. The runner catches Ctrl-C itself, but
--- when it cannot (a run inside a task), the interrupt error ends the main
--- chunk: the host prints "smolwf: interrupted" (one line, on the terminal
--- when stderr is one) and only then do the exit hooks finish the run
--- (run.cut_short) and call run_finished (smol.workflow.runner's
--- finalize). Without counting that line, the erase stops one line short
--- and a stale live line stays on the screen.
function M.stray_lines_before_final(run)
  if not (run and run.cut_short and run.result == "cancelled" and core.isatty(2)) then return 0 end
  for _, inst in ipairs(run.instances or {}) do
    if inst.status == "cancelled" and tostring(inst.error):find("interrupted", 1, true) then return 1 end
  end
  return 0
end

function Live:run_finished(run)
  self.stray_lines = self.drawn > 0 and M.stray_lines_before_final(run) or 0
  self.closed = true
  if self.timer then self.timer:stop(); self.timer = nil end
  self:draw(true)
  self.out:write("\n")
  if self.summary then self.out:write(summary.render(run, {color = self.color, width = self.width() - 1})) end
  self.out:flush()
end

-- ===== Construction ========================================================

local function width_function(w)
  if type(w) == "number" then return function() return w end end
  return w or cached_terminal_width(core.now)
end

--- A new progress observer.
--- opts.out      where to write (write/flush; default io.stdout)
--- opts.live     live view (default: stdout is a terminal and TERM is not "dumb")
--- opts.color    colours in the live view (default: unless NO_COLOR is set)
--- opts.width    columns, a number or a function (default: the terminal's)
--- opts.interval seconds between redraws (default 0.1)
--- opts.summary  also print the summary table at the end (default false:
---               `smolwf run` prints it after the run)
function M.new(opts)
  opts = opts or {}
  local live = opts.live
  if live == nil then
    live = os.getenv("TERM") ~= "dumb" and M.stdout_is_terminal()
  end
  local self = {out = opts.out or io.stdout, summary = opts.summary == true}
  if not live then
    self.partial, self.prefixes = {}, setmetatable({}, {__mode = "k"})
    return setmetatable(self, Plain)
  end
  if opts.color == nil then self.color = not M.no_color() else self.color = opts.color end
  self.width = width_function(opts.width)
  self.interval = opts.interval or 0.1
  self.clock, self.new_timer = core.time, core.timer
  self.running, self.state, self.finished, self.drawn, self.draws = {}, {}, {}, 0, 0
  return setmetatable(self, Live)
end

return M
