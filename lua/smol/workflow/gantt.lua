-- The run's timeline as an inline SVG Gantt chart for report.html: one row
-- per step instance showing when it was queued, each attempt (coloured by
-- its result), the waits between retries, and skipped instances; with a
-- time axis, grid lines and a legend. Pure string building, no I/O.
local text = require "smol.workflow.text"

local M = {}

local CHART_W, RIGHT_PAD = 760, 24
local ROW_H, BAR_H, TOP, AXIS_H = 22, 14, 34, 26
-- The label column fits the longest id up to MAX_LABEL characters (about
-- CHAR_W pixels each at 12px); longer ids are cut in the middle, so ids
-- sharing a long prefix (or suffix) still read apart.
local MIN_LABEL, MAX_LABEL, CHAR_W = 12, 48, 7

M.LEGEND = {
  {"queued", "queued"}, {"success", "ok"}, {"failed", "failed"}, {"timed_out", "timed out"},
  {"cancelled", "cancelled"}, {"running", "unfinished"}, {"backoff", "retry wait"},
  {"skipped", "skipped"},
}

local esc = text.xml_escape

-- Maps wall-clock times to x positions over [t0, t0 + span].
local function scale(t0, span, x0)
  return function(t) return x0 + (t - t0) / span * CHART_W end
end

--- A tick step of 1, 2 or 5 x 10^k giving at most ~8 ticks over span.
function M.tick_step(span)
  local raw = span / 8
  local mag = 10 ^ math.floor(math.log(raw, 10))
  for _, m in ipairs({1, 2, 5, 10}) do
    if m * mag >= raw then return m * mag end
  end
  return 10 * mag
end

--- An axis label: "0s", "0.5s", "12s", "2m30s".
function M.tick_label(t)
  if t < 60 then return (string.format("%.3f", t):gsub("%.?0+$", "")) .. "s" end
  local s = math.floor(t + 0.5)
  return string.format("%dm%02ds", s // 60, s % 60)
end

-- The time span the chart covers: the run, stretched to every recorded time.
local function time_range(run)
  local t0, t1 = run.started_at or math.huge, run.ended_at or -math.huge
  local function see(t)
    if t then t0, t1 = math.min(t0, t), math.max(t1, t) end
  end
  for _, inst in ipairs(run.instances or {}) do
    see(inst.queued_at); see(inst.started_at); see(inst.ended_at)
    for _, a in ipairs(inst.attempts or {}) do see(a.started_at); see(a.ended_at) end
  end
  if t0 == math.huge then t0, t1 = 0, 0 end
  return t0, math.max(t1 - t0, 0.001)
end

local function rect(x1, x2, y, h, class, title)
  return string.format('<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%d" rx="2"><title>%s</title></rect>',
    class, x1, y, math.max(x2 - x1, 2), h, esc(title))
end

local FINAL = {success = true, failed = true, timed_out = true, cancelled = true, skipped = true}

--- How attempt i of inst is drawn: its status class and end time. An
--- attempt of a finished instance still marked running, or without a
--- result (Ctrl-C can leave one so), was cut short: the last takes the
--- instance's status, an earlier one that ended led to a retry (failed).
--- One without an end ends with the instance, else the run (run_end).
function M.attempt_outcome(inst, i, run_end)
  local a = inst.attempts[i]
  local t_end = a.ended_at or inst.ended_at or run_end
  if a.status and a.status ~= "running" then return a.status, t_end end
  if not FINAL[inst.status] then return "running", a.ended_at or run_end end
  if i == #inst.attempts then return inst.status, t_end end
  return a.ended_at and "failed" or "cancelled", t_end
end

local function attempt_title(inst, i, a, class, t0, t_end)
  local s = string.format("%s, attempt %d: %s, %s → %s (%s)", inst.id, i,
    text.word(class), M.tick_label(a.started_at - t0),
    M.tick_label(t_end - t0), text.duration(t_end - a.started_at))
  if a.exit_code then s = s .. ", exit " .. a.exit_code end
  if a.error then s = s .. "\n" .. tostring(a.error) end
  return s
end

-- The shapes of one row: queued wait, attempts, retry waits, skip marker.
local function row_shapes(inst, y, x, t0, t_last)
  local out, attempts = {}, inst.attempts or {}
  local first_start = attempts[1] and attempts[1].started_at or inst.ended_at
  if inst.queued_at and first_start and first_start > inst.queued_at then
    out[#out + 1] = rect(x(inst.queued_at), x(first_start), y + 3, BAR_H - 6, "queued",
      string.format("%s: queued for %s", inst.id, text.duration(first_start - inst.queued_at)))
  end
  for i, a in ipairs(attempts) do
    local class, t_end = M.attempt_outcome(inst, i, t_last)
    local prev = attempts[i - 1]
    if prev and prev.ended_at then
      out[#out + 1] = string.format('<line class="backoff" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"><title>%s</title></line>',
        x(prev.ended_at), x(a.started_at), y + BAR_H / 2, y + BAR_H / 2,
        esc(inst.id .. ": retry wait " .. text.duration(a.started_at - prev.ended_at)))
    end
    out[#out + 1] = rect(x(a.started_at), x(t_end), y, BAR_H, class, attempt_title(inst, i, a, class, t0, t_end))
  end
  if #attempts == 0 and inst.ended_at then
    out[#out + 1] = string.format('<circle class="%s" cx="%.1f" cy="%.1f" r="4"><title>%s</title></circle>',
      inst.status, x(inst.ended_at), y + BAR_H / 2,
      esc(inst.id .. ": " .. text.word(inst.status) .. (inst.error and (" (" .. tostring(inst.error) .. ")") or "")))
  end
  return table.concat(out)
end

--- The label column for these instances: how many characters of an id
--- show, and where the chart starts (x0).
function M.label_layout(instances)
  local longest = MIN_LABEL
  for _, inst in ipairs(instances) do longest = math.max(longest, utf8.len(tostring(inst.id)) or 0) end
  local chars = math.min(longest, MAX_LABEL)
  local label_w = chars * CHAR_W + 8
  return {chars = chars, label_w = label_w, x0 = label_w + 10}
end

local function row_svg(inst, index, x, t0, t_last, g)
  local y = TOP + (index - 1) * ROW_H + (ROW_H - BAR_H) / 2
  local band = index % 2 == 0 and string.format('<rect class="band" x="0" y="%d" width="%d" height="%d"/>',
    TOP + (index - 1) * ROW_H, g.x0 + CHART_W + RIGHT_PAD, ROW_H) or ""
  local label = string.format('<a href="#log-%d"><text class="label" x="%d" y="%.1f">%s<title>%s</title></text></a>',
    index, g.label_w, y + BAR_H - 3, esc(text.truncate_middle(text.valid_utf8(tostring(inst.id)), g.chars)), esc(inst.id))
  return band .. label .. row_shapes(inst, y, x, t0, t_last)
end

local function axis_svg(span, rows, x0)
  local out, step = {}, M.tick_step(span)
  local bottom = TOP + rows * ROW_H
  local t = 0
  while t <= span + step * 1e-6 do
    local xx = x0 + t / span * CHART_W
    out[#out + 1] = string.format('<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>', xx, xx, TOP - 4, bottom)
    out[#out + 1] = string.format('<text class="tick" x="%.1f" y="%d">%s</text>', xx, TOP - 10, M.tick_label(t))
    out[#out + 1] = string.format('<text class="tick" x="%.1f" y="%d">%s</text>', xx, bottom + 16, M.tick_label(t))
    t = t + step
  end
  return table.concat(out)
end

local function legend_svg(y, x0)
  local out, xx = {}, x0
  for _, item in ipairs(M.LEGEND) do
    local class, label = item[1], item[2]
    if class == "backoff" then
      out[#out + 1] = string.format('<line class="backoff" x1="%d" x2="%d" y1="%d" y2="%d"/>', xx, xx + 14, y + 5, y + 5)
    elseif class == "skipped" then
      out[#out + 1] = string.format('<circle class="skipped" cx="%d" cy="%d" r="4"/>', xx + 6, y + 5)
    else
      out[#out + 1] = string.format('<rect class="%s" x="%d" y="%d" width="14" height="10" rx="2"/>', class, xx, y)
    end
    out[#out + 1] = string.format('<text class="legend" x="%d" y="%d">%s</text>', xx + 19, y + 9, label)
    xx = xx + 34 + utf8.len(label) * 7
  end
  return table.concat(out)
end

-- What the per-provider chart (smol.workflow.gantt_lanes) shares with this one.
M.CHART_W, M.RIGHT_PAD, M.ROW_H, M.BAR_H, M.TOP, M.AXIS_H = CHART_W, RIGHT_PAD, ROW_H, BAR_H, TOP, AXIS_H
M.time_range, M.scale, M.rect, M.axis_svg, M.attempt_title = time_range, scale, rect, axis_svg, attempt_title

--- The chart as an <svg> element string.
function M.render(run)
  local instances = run.instances or {}
  local t0, span = time_range(run)
  local g = M.label_layout(instances)
  local x = scale(t0, span, g.x0)
  local width, height = g.x0 + CHART_W + RIGHT_PAD, TOP + #instances * ROW_H + AXIS_H + 24
  local out = {string.format('<svg class="gantt" role="img" aria-label="Timeline of the steps" width="%d" height="%d" viewBox="0 0 %d %d">',
    width, height, width, height)}
  -- Grid first, so the bars are drawn over it.
  out[#out + 1] = axis_svg(span, #instances, g.x0)
  for i, inst in ipairs(instances) do out[#out + 1] = row_svg(inst, i, x, t0, t0 + span, g) end
  out[#out + 1] = legend_svg(height - 16, g.x0)
  out[#out + 1] = "</svg>"
  return table.concat(out, "\n")
end

return M
