-- The end-of-run summary table: one row per step instance (mark, id,
-- status, duration, attempts, exit code, first line of the error), then a
-- line with the result and counts, and where the report is. Given a width
-- (by default the terminal's, when stdout is one) the table fits it: the
-- columns stay whole, ids are cut in the middle if need be, and the note
-- wraps in its column or, when that is too narrow, below its row. Without
-- one (a log) a long note is cut and its whole line follows the row.
local core = require "smol.core"
local text = require "smol.workflow.text"
local pool_view = require "smol.workflow.pool_view"

local M = {}

local HEADERS = {"", "STEP", "STATUS", "TIME", "TRIES", "EXIT", "NOTE"}
local RIGHT_ALIGNED = {[4] = true, [5] = true, [6] = true}
local ORDER = {"success", "failed", "timed_out", "cancelled", "skipped", "running", "queued", "pending"}

-- Without a width, a note longer than this is cut, and its whole line (up
-- to MAX_FULL_NOTE) follows the row: a log has no report beside it.
local MAX_NOTE = 72
local MAX_FULL_NOTE = 2000
-- With a width, the note column is at least this wide, else notes go on
-- lines of their own below their row.
local MIN_NOTE = 16
local MAX_NOTE_LINES = 3
-- Ids are never cut below this many characters to make the table fit.
local MIN_STEP = 8
local SEP = "  "
-- Lines of a failed step's stderr shown below its row.
M.STDERR_LINES = 8

-- The note, and the whole line when the note is cut.
local function note_of(inst, opts)
  if inst.error == nil then return "" end
  local line = text.terminal_line((tostring(inst.error):match("^[^\n]*")))
  line = text.strip_status(inst.status, line)
  if opts.width then return line end
  local note = text.truncate(line, MAX_NOTE)
  return note, note ~= line and text.truncate(line, MAX_FULL_NOTE) or nil
end

-- A failed step's details below its row: the whole error when its note
-- was cut, then its stderr tail (or a replay mismatch's table).
local function details_of(inst, full)
  local tail = text.failure_details(inst, M.STDERR_LINES)
  if full then table.insert(tail, 1, full) end
  return tail
end

local function row_of(inst, opts)
  local reused = text.reuse_label(inst)
  local note, full
  if reused then note = text.terminal_line(reused) else note, full = note_of(inst, opts) end
  return {
    -- on a pool, where it ran: "test[shard=2] @n2"
    text.mark(inst.status), text.terminal_line(tostring(inst.id) .. (inst.placement and ("  " .. pool_view.tag(inst, opts.pool))
      or "")), reused and reused:match("^%S+") or text.word(inst.status),
    text.ran(inst) and text.duration(inst.duration) or "-", tostring(inst.attempts and #inst.attempts or 0),
    inst.exit_code and tostring(inst.exit_code) or "-", note,
    status = inst.status, tail = details_of(inst, full),
  }
end

local function column_widths(rows)
  local widths = {}
  for _, row in ipairs(rows) do
    for c = 1, #HEADERS - 1 do widths[c] = math.max(widths[c] or 0, text.width(row[c])) end
  end
  return widths
end

local function table_width(widths)
  local w = 0
  for c = 1, #HEADERS - 1 do w = w + widths[c] end
  return w + #SEP * (#HEADERS - 2)
end

-- The layout for opts.width: the columns before the note always fit (ids
-- cut in the middle if need be); the note gets the rest of the line, or,
-- when that is too narrow, lines of its own below its row.
local function plan_layout(rows, opts)
  local widths = column_widths(rows)
  local layout = {widths = widths}
  if not opts.width then return layout end
  local over = table_width(widths) - opts.width
  if over > 0 then widths[2] = math.max(widths[2] - over, MIN_STEP) end
  local room = opts.width - table_width(widths) - #SEP
  if room >= MIN_NOTE then layout.note_width = room
  else layout.note_below = math.max(opts.width - 3, MIN_NOTE) end
  return layout
end

local function fixed_cells(row, widths)
  local cells = {}
  for c = 1, #HEADERS - 1 do
    local cell = c == 2 and text.truncate_middle(row[c], widths[c]) or row[c]
    local pad = string.rep(" ", widths[c] - text.width(cell))
    cells[c] = RIGHT_ALIGNED[c] and pad .. cell or cell .. pad
  end
  return table.concat(cells, SEP)
end

local function paint_mark(line, row, opts)
  if not (opts.color and row.status) then return line end
  -- Colour only the mark and status word, so the table stays readable.
  return text.paint(row[1], text.sgr[row.status], true) .. line:sub(#row[1] + 1)
end

-- A note wrapped to width, at most MAX_NOTE_LINES lines (the last marked
-- "…" when some was left out: the report has it all).
local function note_lines(note, width)
  -- Only what can show is wrapped: a huge one-line error stays cheap.
  local parts = text.wrap(text.truncate(note, width * (MAX_NOTE_LINES + 1)), width)
  if #parts <= MAX_NOTE_LINES then return parts end
  local kept = table.move(parts, 1, MAX_NOTE_LINES, 1, {})
  local last = kept[MAX_NOTE_LINES]
  if utf8.len(last) >= width then last = last:sub(1, utf8.offset(last, width) - 1) end
  kept[MAX_NOTE_LINES] = last .. "…"
  return kept
end

-- The lines of one row: the cells, then its note beside them (wrapped in
-- the note column) or below them (indented under the step).
local function format_row(row, layout, opts)
  local line = fixed_cells(row, layout.widths)
  local note = row[#HEADERS]
  local lines = {}
  if note == "" or (layout.note_below and row == HEADERS) then
    lines[1] = line
  elseif layout.note_below then
    lines[1] = line
    for _, part in ipairs(note_lines(note, layout.note_below)) do lines[#lines + 1] = "   " .. part end
  else
    local parts = layout.note_width and note_lines(note, layout.note_width) or {note}
    local indent = string.rep(" ", text.width(line) + #SEP)
    lines[1] = line .. SEP .. parts[1]
    for i = 2, #parts do lines[i] = indent .. parts[i] end
  end
  for i, l in ipairs(lines) do
    -- Last resort for a terminal too narrow even for the cut-down columns.
    if opts.width then l = text.truncate(l, opts.width) end
    lines[i] = (l:gsub("%s+$", ""))
  end
  lines[1] = paint_mark(lines[1], row, opts)
  for _, tail_line in ipairs(row.tail or {}) do
    local parts = opts.width and text.wrap(tail_line, math.max(opts.width - 5, 10)) or {tail_line}
    for _, part in ipairs(parts) do lines[#lines + 1] = text.paint("   │ " .. part, "2", opts.color) end
  end
  return table.concat(lines, "\n")
end

--- "12 steps: 10 ok, 1 failed, 1 skipped"
local function counts_line(run)
  local counts, total = {}, 0
  for _, inst in ipairs(run.instances or {}) do
    counts[inst.status] = (counts[inst.status] or 0) + 1
    total = total + 1
  end
  local parts = {}
  for _, status in ipairs(ORDER) do
    if counts[status] then parts[#parts + 1] = counts[status] .. " " .. text.word(status) end
  end
  local noun = total == 1 and "step" or "steps"
  local reused = 0
  for _, inst in ipairs(run.instances or {}) do if text.reuse_label(inst) then reused = reused + 1 end end
  local tail = reused > 0 and string.format(" (%d cached or reused)", reused) or ""
  return string.format("%d %s: %s%s", total, noun, table.concat(parts, ", "), tail)
end

-- "ci failure in 4.8s — 8 steps: ...", wrapped at spaces to opts.width.
local function result_line(run, opts)
  local duration = run.ended_at and run.started_at and run.ended_at - run.started_at
  local result = tostring(run.result or "unknown")
  local name = text.terminal_line(tostring(run.name or "workflow"))
  local line = string.format("%s %s in %s — %s", name, result, text.duration(duration), counts_line(run))
  local lines = opts.width and text.wrap(line, opts.width) or {line}
  local code = result == "success" and "32" or "31"
  local at = #name + 2
  if lines[1]:sub(at, at + #result - 1) == result then
    lines[1] = lines[1]:sub(1, at - 1) .. text.paint(result, code, opts.color) .. lines[1]:sub(at + #result)
  end
  return table.concat(lines, "\n")
end

--- The width of the terminal on stdout less one column (a full-width line
--- wraps on some terminals), or nil when stdout is not a terminal.
function M.terminal_width()
  if not core.isatty(1) then return nil end
  local w = core.term_width() or tonumber(os.getenv("COLUMNS")) or 80
  return math.max(w - 1, 20)
end

--- The summary as a string ending in "\n".
--- opts.color: SGR colours
--- opts.width: fit the table in this many columns (ids cut in the middle,
---   notes wrapped); nil: the terminal's when stdout is one; false: no limit.
function M.render(run, opts)
  opts = setmetatable({}, {__index = opts or {}})
  if opts.width == nil then opts.width = M.terminal_width() or false end
  local rows = {HEADERS}
  opts.pool = run.pool
  for _, inst in ipairs(run.instances or {}) do rows[#rows + 1] = row_of(inst, opts) end
  local layout = plan_layout(rows, opts)
  local lines = {}
  for _, row in ipairs(rows) do lines[#lines + 1] = format_row(row, layout, opts) end
  lines[#lines + 1] = ""
  lines[#lines + 1] = result_line(run, opts)
  if run.report_dir then lines[#lines + 1] = "report: " .. run.report_dir end
  return table.concat(lines, "\n") .. "\n"
end

return M
