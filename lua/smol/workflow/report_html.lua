-- report.html: one self-contained page (inline CSS and SVG, no script, no
-- external URL, so it opens offline and from a CI artifact store) with the
-- run's result (and the sandbox it got), a Gantt timeline of the steps
-- beside the graph of the steps (smol.workflow.graph), the summary table, and each step's artifacts (links relative to the report
-- directory) and stdout/stderr in a collapsible <details>, HTML-escaped.
local text = require "smol.workflow.text"
local gantt = require "smol.workflow.gantt"
local gantt_lanes = require "smol.workflow.gantt_lanes"
local pool_view = require "smol.workflow.pool_view"
local graph = require "smol.workflow.graph"
local reportdir = require "smol.workflow.reportdir"

local M = {}
-- Per log stream shown inline; the full log stays in logs/ (linked).
M.MAX_LOG_BYTES = 256 * 1024

local esc = text.xml_escape

local STYLE = [[
:root{--ok:#1f883d;--fail:#cf222e;--timeout:#d4650b;--cancel:#8250df;--skip:#8c959f;
--queue:#d0d7de;--run:#0969da;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#f6f8fa}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);
margin:0 auto;padding:24px 32px;max-width:1600px;overflow-wrap:anywhere}
.views{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.views>section{flex:1 1 560px;min-width:0}
.views h2{margin-top:0}
svg.graph{display:block;max-width:100%;height:auto}svg.graph text{font:12px system-ui,sans-serif;fill:#fff}
svg.graph .edge{fill:none;stroke:var(--skip);stroke-width:1.3}
svg.graph .node{stroke:none}svg.graph .success{fill:var(--ok)}svg.graph .failed{fill:var(--fail)}
svg.graph .timed_out{fill:var(--timeout)}svg.graph .cancelled{fill:var(--cancel)}
svg.graph .skipped,svg.graph .pending,svg.graph .queued{fill:var(--skip)}svg.graph .running{fill:var(--run)}
pre.value{max-height:16em}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.meta{color:var(--muted);margin:0}
.badge{display:inline-block;padding:1px 10px;border-radius:12px;font-size:13px;color:#fff;vertical-align:middle}
.badge.success{background:var(--ok)}.badge.failure,.badge.invalid{background:var(--fail)}.badge.cancelled{background:var(--cancel)}
.chart{overflow-x:auto;border:1px solid var(--line);border-radius:6px;padding:6px 0}
svg.gantt{display:block;width:100%;height:auto;min-width:640px}
svg.gantt text{font:12px system-ui,sans-serif;fill:var(--fg)}
svg.gantt .label{text-anchor:end}svg.gantt .tick{text-anchor:middle;fill:var(--muted);font-size:11px}
svg.gantt .grid{stroke:var(--line);stroke-width:1}svg.gantt .band{fill:var(--bg)}
svg.gantt .success{fill:var(--ok)}svg.gantt .failed{fill:var(--fail)}svg.gantt .timed_out{fill:var(--timeout)}
svg.gantt .cancelled{fill:var(--cancel)}svg.gantt .skipped{fill:#fff;stroke:var(--skip);stroke-width:2}
svg.gantt .queued,svg.gantt .pending{fill:var(--queue)}svg.gantt .running{fill:var(--run)}
svg.gantt .backoff{stroke:var(--fail);stroke-width:2;stroke-dasharray:3 3}
table.steps{border-collapse:collapse;width:100%}
.steps th,.steps td{text-align:left;padding:5px 10px;border-bottom:1px solid var(--line);vertical-align:baseline}
.steps th{background:var(--bg);font-weight:600;white-space:nowrap}.steps td.status{white-space:nowrap}
.steps td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.steps td.note{color:var(--muted);white-space:pre-wrap;overflow-wrap:anywhere}
.steps td.step{min-width:12em;overflow-wrap:anywhere}.steps td.sandbox{font-size:13px}
.artifacts{margin:6px 0 4px;padding-left:20px}.artifacts li{font:12px/1.5 ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
.missing{color:var(--fail)}.warn{color:var(--fail);font-weight:600}
.st-success{color:var(--ok)}.st-failed{color:var(--fail)}.st-timed_out{color:var(--timeout)}
.st-cancelled{color:var(--cancel)}.st-skipped,.st-pending,.st-queued{color:var(--skip)}.st-running{color:var(--run)}
details{border:1px solid var(--line);border-radius:6px;margin:8px 0}
details>summary{cursor:pointer;padding:7px 12px;background:var(--bg);border-radius:6px}
details[open]>summary{border-bottom:1px solid var(--line);border-radius:6px 6px 0 0}
.log{padding:4px 12px 10px}.log h3{font-size:13px;margin:10px 0 4px;color:var(--muted)}
pre{background:#0d1117;color:#e6edf3;padding:10px;border-radius:6px;overflow:auto;max-height:32em;margin:0;
font:12px/1.4 ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-all}
.empty{color:var(--muted);font-style:italic}
]]

local function run_duration(run)
  return run.ended_at and run.started_at and run.ended_at - run.started_at
end

-- "sandbox auto/default: isolation namespaces", flagged when the steps ran
-- without isolation; "" until the engine says which sandbox it got.
local function sandbox_html(sb)
  local label = text.sandbox_label(sb)
  if not label then return "" end
  return string.format(' · sandbox <span class="%s">%s</span>', sb.isolation == "none" and "warn" or "sb", esc(label))
end

-- " · resumed from <a>the run in DIR</a>" (a link to its report).
local function resumed_html(run)
  if not run.resumed_from then return "" end
  local target = run.resumed_from:gsub("/+$", "")
  local here = (run.report_dir or ""):gsub("/+$", "")
  local href = target .. "/report.html"
  -- Sibling run directories (.smolwf/runs/A and B) link relatively, so the
  -- link survives copying the runs elsewhere.
  if (here:match("^(.*)/") or "") == (target:match("^(.*)/") or "") then
    href = "../" .. target:match("[^/]*$") .. "/report.html"
  end
  return string.format(' · resumed from <a href="%s">%s</a>', esc(text.url_path(href), true), esc(target))
end

local function header_html(run)
  local started = run.started_at and os.date("!%Y-%m-%d %H:%M:%S UTC", math.floor(run.started_at)) or "not started"
  local result = tostring(run.result or "unfinished")
  local n = #(run.instances or {})
  return string.format('<header><h1>%s <span class="badge %s">%s</span></h1>\n<p class="meta">started %s · took %s · %d step %s · jobs %s%s%s</p></header>\n',
    esc(run.name or "workflow"), esc(result, true), esc(result), started,
    text.duration(run_duration(run)), n, n == 1 and "instance" or "instances",
    esc(tostring(run.jobs or "-")), sandbox_html(run.sandbox), resumed_html(run))
end

-- U+23F1 (the terminal's timed-out mark) is missing from common fonts; a
-- page shows a clock from the Geometric Shapes block instead.
local function mark(status)
  if status == "timed_out" then return "◷" end
  return text.mark(status)
end

local function status_cell(status)
  return string.format('<td class="status st-%s">%s %s</td>', esc(status, true), mark(status), esc(text.word(status)))
end

-- "-" for an instance that never ran (skipped, cancelled while queued).
local function duration_of(inst)
  return text.ran(inst) and text.duration(inst.duration) or "-"
end

-- Whether some instance ran in another sandbox than the workflow's: then
-- the table gets a Sandbox column.
local function sandboxes_differ(run)
  local shared = text.sandbox_label(run.sandbox)
  for _, inst in ipairs(run.instances or {}) do
    local own = text.sandbox_label(inst.sandbox)
    if own and own ~= shared then return true end
  end
  return false
end

local function table_row(run, inst, index, with_sandbox)
  local start = inst.started_at and run.started_at and "+" .. text.duration(inst.started_at - run.started_at) or "-"
  local artifacts = #(inst.artifacts or {}) > 0 and string.format('<br><a class="meta" href="#log-%d">%s</a>', index,
    text.plural(#inst.artifacts, "artifact")) or ""
  return table.concat{
    "<tr>", status_cell(inst.status),
    string.format('<td class="step"><a href="#log-%d">%s</a>%s%s</td>', index, esc(inst.id), artifacts,
      -- on a pool: where it ran, and how often it ran again because a provider was lost
      inst.placement and string.format('<br><span class="meta">%s%s</span>', esc(pool_view.tag(inst, run.pool)),
        (inst.infra_retries or 0) > 0 and esc((", moved %d×: provider lost"):format(inst.infra_retries)) or "") or ""),
    string.format('<td class="num">%s</td><td class="num">%s</td>', start, duration_of(inst)),
    string.format('<td class="num">%d</td><td class="num">%s</td>', #(inst.attempts or {}), inst.exit_code or "-"),
    with_sandbox and string.format('<td class="sandbox">%s</td>', esc(text.sandbox_label(inst.sandbox) or "-")) or "",
    string.format('<td class="note">%s</td>', esc(inst.error and text.strip_status(inst.status, tostring(inst.error))
      or text.reuse_label(inst) or "")),
    "</tr>\n"}
end

local function table_html(run)
  local with_sandbox = sandboxes_differ(run)
  local out = {'<table class="steps"><thead><tr><th>Status</th><th>Step</th><th>Started</th><th>Duration</th><th>Attempts</th><th>Exit</th>',
    with_sandbox and "<th>Sandbox</th>" or "", '<th>Note</th></tr></thead><tbody>\n'}
  for i, inst in ipairs(run.instances or {}) do out[#out + 1] = table_row(run, inst, i, with_sandbox) end
  out[#out + 1] = "</tbody></table>\n"
  return table.concat(out)
end

local function stream_html(run, inst, rel, stream)
  local data, cut = reportdir.read_tail(reportdir.join(run.report_dir, rel), M.MAX_LOG_BYTES)
  local link = string.format('<a href="%s">%s</a>', esc(text.url_path(rel), true), esc(rel))
  if not data or data == "" then return string.format('<h3>%s</h3><p class="empty">empty</p>', stream) end
  local note = cut and string.format(" — last %d KiB shown, full log: %s", M.MAX_LOG_BYTES // 1024, link) or " — " .. link
  local dropped = inst.log_dropped and inst.log_dropped[stream]
  if dropped then note = note .. string.format(" (the log dropped the first %s to stay under its cap)", text.bytes(dropped)) end
  if text.is_binary(data) then   -- its bytes would show as noise: say what it is, the link has it
    local size = require("lfs").attributes(reportdir.join(run.report_dir, rel), "size") or #data
    return string.format('<h3>%s — %s</h3><p class="empty">%s</p>', stream, link, esc(text.binary_summary(size)))
  end
  return string.format("<h3>%s%s</h3><pre>%s</pre>", stream, note, esc(data))
end

local function has_log_file(run, inst)
  for _, rel in pairs(inst.logs or {}) do
    if reportdir.exists(reportdir.join(run.report_dir, rel)) then return true end
  end
  return false
end

local function logs_html(run, inst)
  if not text.ran(inst) then return '<p class="empty">this step did not run</p>' end
  -- Log files are created at a stream's first byte: none means no output.
  if not has_log_file(run, inst) then return '<p class="empty">no output</p>' end
  local parts = {}
  for _, stream in ipairs({"stdout", "stderr"}) do
    if inst.logs[stream] then parts[#parts + 1] = stream_html(run, inst, inst.logs[stream], stream) end
  end
  return table.concat(parts, "\n")
end

-- The step's artifacts as links (paths relative to the report directory,
-- so the links work wherever the directory is copied); one the engine
-- listed but that is not there is shown as missing, not linked.
local function artifacts_html(run, inst)
  if #(inst.artifacts or {}) == 0 then return "" end
  local items = {}
  for _, rel in ipairs(inst.artifacts) do
    if reportdir.exists(reportdir.join(run.report_dir, rel)) then
      items[#items + 1] = string.format('<li><a href="%s">%s</a></li>', esc(text.url_path(rel), true), esc(rel))
    else
      items[#items + 1] = string.format('<li class="missing">%s (missing)</li>', esc(rel))
    end
  end
  return string.format('<h3>artifacts</h3><ul class="artifacts">%s</ul>\n', table.concat(items))
end

-- The step's return value, as report.json has it (JSON), when it returned one.
local function value_html(inst)
  if inst.value == nil then return "" end
  local jsontext = require "smol.workflow.jsontext"
  local value, why = jsontext.exact(inst.value)
  local body = value ~= nil and esc(jsontext.encode(value))
    or string.format('<span class="empty">not JSON-representable: %s</span>', esc(why))
  return string.format('<h3>return value</h3><pre class="value">%s</pre>\n', body)
end

local function details_html(run, inst, index)
  -- Failures open by default: that is the log a reader came for.
  local open = (inst.status == "failed" or inst.status == "timed_out") and " open" or ""
  local extra = {}
  local tries = text.attempts_label(inst)
  if tries ~= "" then extra[#extra + 1] = tries end
  if #(inst.artifacts or {}) > 0 then extra[#extra + 1] = text.plural(#inst.artifacts, "artifact") end
  return string.format('<details id="log-%d"%s><summary><span class="st-%s">%s</span> <b>%s</b> — %s, %s%s</summary>\n<div class="log">%s%s</div></details>\n',
    index, open, esc(inst.status, true), mark(inst.status), esc(inst.id), esc(text.word(inst.status)),
    duration_of(inst), #extra > 0 and ", " .. table.concat(extra, ", ") or "",
    value_html(inst) .. artifacts_html(run, inst), logs_html(run, inst))
end

--- The page as a string.
function M.render(run)
  local out = {'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    string.format("<title>%s — %s</title>", esc(run.name or "workflow"), esc(tostring(run.result or "unfinished"))),
    "<style>", STYLE, "</style></head><body>\n", header_html(run),
    '<div class="views"><section><h2>Timeline</h2><div class="chart">', gantt.render(run), "</div></section>\n",
    -- on a pool, the same attempts again: one lane per provider
    run.pool and ('<section><h2>By provider</h2><div class="chart">' .. gantt_lanes.render(run) .. "</div></section>\n") or "",
    '<section><h2>Graph</h2><div class="chart">', graph.svg(run), "</div></section></div>\n",
    "<h2>Steps</h2>", table_html(run), "<h2>Logs</h2>\n"}
  for i, inst in ipairs(run.instances or {}) do out[#out + 1] = details_html(run, inst, i) end
  out[#out + 1] = "</body></html>\n"
  return table.concat(out)
end

--- Writes run.report_dir/report.html (atomically; opts.mask hides the secrets); returns its path.
function M.write(run, opts)
  return reportdir.write_report(run, "report.html", M.render(run), opts and opts.mask)
end

return M
