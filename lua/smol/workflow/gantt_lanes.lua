-- The run's timeline by provider, for report.html when its steps ran on a
-- pool (smol.pool): one lane per provider, each attempt a bar in the lane
-- of the provider it ran on, stacked in as many rows as ran at once there.
-- A lost provider's lane says so. Pure string building, no I/O.
local gantt = require "smol.workflow.gantt"
local text = require "smol.workflow.text"

local M = {}

local esc = text.xml_escape
local LABEL_W = 150

-- The attempts that ran on each provider: {index = {{inst, i, a}...}}, by start.
local function attempts_by_provider(run)
  local by = {}
  for _, inst in ipairs(run.instances or {}) do
    for i, a in ipairs(inst.attempts or {}) do
      local where = a.placement and a.placement.provider
      if where and a.started_at then
        by[where] = by[where] or {}
        table.insert(by[where], {inst = inst, i = i, a = a})
      end
    end
  end
  for _, list in pairs(by) do table.sort(list, function(p, q) return p.a.started_at < q.a.started_at end) end
  return by
end

-- Packs bars into rows: each goes into the first row free at its start.
local function pack(list, run_end)
  local row_ends = {}
  for _, bar in ipairs(list) do
    local class, t_end = gantt.attempt_outcome(bar.inst, bar.i, run_end)
    bar.class, bar.t_end = class, t_end
    local row = 1
    while row_ends[row] and row_ends[row] > bar.a.started_at do row = row + 1 end
    row_ends[row], bar.row = t_end, row
  end
  return math.max(#row_ends, 1)
end

local function lane_label(p)
  local name = ("%d %s"):format(p.index, p.node or "")
  if p.alive == false then name = name .. " (lost)" end
  return name
end

--- The chart as an <svg> element string ("" when the run had no pool).
function M.render(run)
  local pool = run.pool
  if not pool or not pool.providers then return "" end
  local t0, span = gantt.time_range(run)
  local x0 = LABEL_W + 10
  local x = gantt.scale(t0, span, x0)
  local by = attempts_by_provider(run)
  local rows, lanes = 0, {}
  for _, p in ipairs(pool.providers) do
    local list = by[p.index] or {}
    local n = pack(list, t0 + span)
    lanes[#lanes + 1] = {p = p, list = list, first = rows + 1, rows = n}
    rows = rows + n
  end
  local width, height = x0 + gantt.CHART_W + gantt.RIGHT_PAD, gantt.TOP + rows * gantt.ROW_H + gantt.AXIS_H + 8
  local out = {string.format('<svg class="gantt lanes" role="img" aria-label="Timeline by provider" width="%d" height="%d" viewBox="0 0 %d %d">',
    width, height, width, height), gantt.axis_svg(span, rows, x0)}
  for li, lane in ipairs(lanes) do
    local top = gantt.TOP + (lane.first - 1) * gantt.ROW_H
    if li % 2 == 0 then
      out[#out + 1] = string.format('<rect class="band" x="0" y="%d" width="%d" height="%d"/>', top, width, lane.rows * gantt.ROW_H)
    end
    local title = lane.p.lost and ("\n" .. tostring(lane.p.lost)) or ""
    out[#out + 1] = string.format('<text class="label" x="%d" y="%.1f">%s<title>%s</title></text>', LABEL_W,
      top + (gantt.ROW_H + gantt.BAR_H) / 2 - 3, esc(text.truncate_middle(lane_label(lane.p), 20)),
      esc(lane_label(lane.p) .. title))
    for _, bar in ipairs(lane.list) do
      local y = top + (bar.row - 1) * gantt.ROW_H + (gantt.ROW_H - gantt.BAR_H) / 2
      out[#out + 1] = gantt.rect(x(bar.a.started_at), x(bar.t_end), y, gantt.BAR_H, bar.class,
        gantt.attempt_title(bar.inst, bar.i, bar.a, bar.class, t0, bar.t_end) .. (bar.a.lost and ("\n" .. bar.a.lost) or ""))
    end
  end
  out[#out + 1] = "</svg>"
  return table.concat(out, "\n")
end

return M
