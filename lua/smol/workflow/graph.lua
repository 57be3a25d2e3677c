-- The expanded step graph (one node per instance, matrix instances
-- included, one edge per need) as Graphviz dot or Mermaid text for
-- `smolwf run --graph`, and as an inline SVG for report.html. Pure string
-- building, no I/O.
local text = require "smol.workflow.text"

local M = {}

-- ===== Text formats =========================================================

local function dot_quote(s)
  return '"' .. tostring(s):gsub('[\\"]', "\\%0"):gsub("\n", "\\n") .. '"'
end

--- The graph in Graphviz's dot language (`dot -Tsvg`).
function M.dot(instances, name)
  local out = { "digraph " .. dot_quote(name or "workflow") .. " {", "  rankdir=LR;",
    '  node [shape=box, style=rounded, fontname="sans-serif"];' }
  for _, inst in ipairs(instances) do
    local attrs = inst.always and " [style=\"rounded,dashed\"]" or ""
    out[#out + 1] = "  " .. dot_quote(inst.id) .. attrs .. ";"
  end
  for _, inst in ipairs(instances) do
    for _, need in ipairs(inst.needs) do
      out[#out + 1] = ("  %s -> %s;"):format(dot_quote(need), dot_quote(inst.id))
    end
  end
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

-- Mermaid labels are quoted; a quote inside is its entity.
local function mermaid_label(s)
  return '"' .. tostring(s):gsub('"', "#quot;") .. '"'
end

--- The graph as a Mermaid flowchart (GitHub and GitLab render it in Markdown).
function M.mermaid(instances)
  local node_of, out = {}, { "flowchart LR" }
  for i, inst in ipairs(instances) do
    node_of[inst.id] = "n" .. i
    local open, close = "(", ")"
    if inst.always then open, close = "([", "])" end
    out[#out + 1] = ("  n%d%s%s%s"):format(i, open, mermaid_label(inst.id), close)
  end
  for _, inst in ipairs(instances) do
    for _, need in ipairs(inst.needs) do
      out[#out + 1] = ("  %s --> %s"):format(node_of[need], node_of[inst.id])
    end
  end
  return table.concat(out, "\n") .. "\n"
end

M.FORMATS = { dot = M.dot, mermaid = M.mermaid }

-- ===== SVG for the HTML report =============================================

local NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 190, 24, 56, 10, 8
local LABEL_CHARS = 26

-- Columns by depth (an instance sits one column right of its deepest
-- need), rows in run order within a column.
local function layout(instances)
  local col, row, per_col, index = {}, {}, {}, {}
  for i, inst in ipairs(instances) do index[inst.id] = i end
  for _, inst in ipairs(instances) do
    local c = 1
    for _, need in ipairs(inst.needs) do
      if col[need] then c = math.max(c, col[need] + 1) end
    end
    col[inst.id] = c
    per_col[c] = (per_col[c] or 0) + 1
    row[inst.id] = per_col[c]
  end
  local cols, rows = #per_col, 0
  for _, n in ipairs(per_col) do rows = math.max(rows, n) end
  return col, row, cols, rows, index
end

local function position(col, row, id)
  return PAD + (col[id] - 1) * (NODE_W + GAP_X), PAD + (row[id] - 1) * (NODE_H + GAP_Y)
end

local function edge_svg(col, row, from, to)
  local x1, y1 = position(col, row, from)
  local x2, y2 = position(col, row, to)
  x1, y1, y2 = x1 + NODE_W, y1 + NODE_H / 2, y2 + NODE_H / 2
  local mid = (x1 + x2) / 2
  return ('<path class="edge" d="M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f"/>')
    :format(x1, y1, mid, y1, mid, y2, x2, y2)
end

local function node_svg(col, row, inst, index)
  local x, y = position(col, row, inst.id)
  local label = text.truncate_middle(text.valid_utf8(tostring(inst.id)), LABEL_CHARS)
  return table.concat {
    ('<a href="#log-%d"><rect class="node %s" x="%.1f" y="%.1f" width="%d" height="%d" rx="5">'):format(
      index, text.xml_escape(inst.status or "pending", true), x, y, NODE_W, NODE_H),
    ("<title>%s: %s</title></rect>"):format(text.xml_escape(inst.id), text.xml_escape(text.word(inst.status))),
    ('<text x="%.1f" y="%.1f">%s %s</text></a>'):format(x + 8, y + NODE_H - 7,
      text.xml_escape(text.mark(inst.status)), text.xml_escape(label)),
  }
end

--- The graph of a run as an <svg> element, nodes coloured by status and
--- linked to their logs (#log-N, as the page numbers the instances).
function M.svg(run)
  local instances = run.instances or {}
  local col, row, cols, rows, index = layout(instances)
  local w = PAD * 2 + math.max(cols, 1) * NODE_W + math.max(cols - 1, 0) * GAP_X
  local h = PAD * 2 + math.max(rows, 1) * NODE_H + math.max(rows - 1, 0) * GAP_Y
  local out = { ('<svg class="graph" role="img" aria-label="Graph of the steps" width="%d" height="%d" viewBox="0 0 %d %d">')
    :format(w, h, w, h) }
  for _, inst in ipairs(instances) do
    for _, need in ipairs(inst.needs) do
      if col[need] then out[#out + 1] = edge_svg(col, row, need, inst.id) end
    end
  end
  for _, inst in ipairs(instances) do out[#out + 1] = node_svg(col, row, inst, index[inst.id]) end
  out[#out + 1] = "</svg>"
  return table.concat(out, "\n")
end

return M
