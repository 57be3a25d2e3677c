-- The end-of-run summary table: one row per step instance (mark, id,
-- status, duration, attempts, exit code, first line of the error), then a
-- line with the result and counts, and where the report is.
local text = require "smol.workflow.text"

local M = {}

local HEADERS = {"", "STEP", "STATUS", "TIME", "TRIES", "EXIT", "NOTE"}
local RIGHT_ALIGNED = {[4] = true, [5] = true, [6] = true}
local ORDER = {"success", "failed", "timed_out", "cancelled", "skipped", "running", "queued", "pending"}

-- Without a width, a note longer than this is cut (the report has it all).
local MAX_NOTE = 72

local function note_of(inst, opts)
  if inst.error == nil then return "" end
  local line = text.terminal_line((tostring(inst.error):match("^[^\n]*")))
  line = text.strip_status(inst.status, line)
  return opts.width and line or text.truncate(line, MAX_NOTE)
end

local function row_of(inst, opts)
  return {
    text.mark(inst.status), text.terminal_line(tostring(inst.id)), text.word(inst.status),
    text.ran(inst) and text.duration(inst.duration) or "-", tostring(inst.attempts and #inst.attempts or 0),
    inst.exit_code and tostring(inst.exit_code) or "-", note_of(inst, opts),
    status = inst.status,
  }
end

local function column_widths(rows)
  local widths = {}
  for _, row in ipairs(rows) do
    for c = 1, #HEADERS - 1 do widths[c] = math.max(widths[c] or 0, text.width(row[c])) end
  end
  return widths
end

local function format_row(row, widths, opts)
  local cells = {}
  for c = 1, #HEADERS - 1 do
    local pad = string.rep(" ", widths[c] - text.width(row[c]))
    cells[c] = RIGHT_ALIGNED[c] and pad .. row[c] or row[c] .. pad
  end
  local line = table.concat(cells, "  ")
  if row[#HEADERS] ~= "" then line = line .. "  " .. row[#HEADERS] end
  if opts.width then line = text.truncate(line, opts.width) end
  if opts.color and row.status then
    -- Colour only the mark and status word, so the table stays readable.
    local code = text.sgr[row.status]
    line = text.paint(row[1], code, true) .. line:sub(#row[1] + 1)
  end
  return (line:gsub("%s+$", ""))
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
  return string.format("%d %s: %s", total, noun, table.concat(parts, ", "))
end

local function result_line(run, opts)
  local duration = run.ended_at and run.started_at and run.ended_at - run.started_at
  local result = tostring(run.result or "unknown")
  local code = result == "success" and "32" or "31"
  return string.format("%s %s in %s — %s", tostring(run.name or "workflow"),
    text.paint(result, code, opts.color), text.duration(duration), counts_line(run))
end

--- The summary as a string ending in "\n".
--- opts.color: SGR colours; opts.width: cut rows to this many columns.
function M.render(run, opts)
  opts = opts or {}
  local rows = {HEADERS}
  for _, inst in ipairs(run.instances or {}) do rows[#rows + 1] = row_of(inst, opts) end
  local widths = column_widths(rows)
  local lines = {}
  for _, row in ipairs(rows) do lines[#lines + 1] = format_row(row, widths, opts) end
  lines[#lines + 1] = ""
  lines[#lines + 1] = result_line(run, opts)
  if run.report_dir then lines[#lines + 1] = "report: " .. run.report_dir end
  return table.concat(lines, "\n") .. "\n"
end

return M
