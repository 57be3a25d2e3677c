-- junit.xml: one <testcase> per step instance, in the JUnit shape common CI
-- parsers read (Jenkins, GitLab, GitHub actions reporters): <testsuites>
-- with one <testsuite> per run. Failed and timed-out instances get a
-- <failure> with the error message and the last 50 lines of their stderr
-- log; skipped, cancelled and never-run instances get <skipped/>.
local text = require "smol.workflow.text"
local reportdir = require "smol.workflow.reportdir"

local M = {}
M.STDERR_LINES = 50
-- Enough bytes for 50 long-ish lines without reading a huge log whole.
local TAIL_BYTES = 64 * 1024

local FAILED = {failed = true, timed_out = true}
local PASSED = {success = true}

local function attr(s) return text.xml_escape(s, true) end
local function seconds(d) return string.format("%.3f", math.max(d or 0, 0)) end

local function counts(run)
  local c = {tests = 0, failures = 0, skipped = 0}
  for _, inst in ipairs(run.instances or {}) do
    c.tests = c.tests + 1
    if FAILED[inst.status] then c.failures = c.failures + 1
    elseif not PASSED[inst.status] then c.skipped = c.skipped + 1 end
  end
  return c
end

-- The heading and text of a failed instance's stderr tail, or nil: its
-- last lines, or for binary output a line saying how much there is.
local function stderr_tail(run, inst)
  local rel = inst.logs and inst.logs.stderr
  if not rel then return nil end
  local path = reportdir.join(run.report_dir, rel)
  local data = reportdir.read_tail(path, TAIL_BYTES)
  if not data or data == "" then return nil end
  if text.is_binary(data) then
    return ("stderr (%s)"):format(rel), text.binary_summary(require("lfs").attributes(path, "size") or #data)
  end
  return ("last %d lines of stderr (%s)"):format(M.STDERR_LINES, rel), text.last_lines(data, M.STDERR_LINES)
end

-- The error without a leading "<status>:" (the element already says it:
-- no "cancelled: cancelled: interrupted"), or the status word.
local function message_of(inst)
  if inst.error == nil then return text.word(inst.status) end
  local msg = text.strip_status(inst.status, tostring(inst.error))
  return msg ~= "" and msg or text.word(inst.status)
end

local function failure_xml(run, inst)
  local msg = message_of(inst)
  local body = msg
  local heading, tail = stderr_tail(run, inst)
  if tail then body = string.format("%s\n\n--- %s ---\n%s", msg, heading, tail) end
  return string.format('      <failure message="%s" type="%s">%s</failure>\n',
    attr(msg:match("^[^\n]*")), attr(inst.status), text.xml_escape(body))
end

local function skipped_xml(inst)
  local msg = text.word(inst.status)
  if inst.error then msg = msg .. ": " .. message_of(inst) end
  return string.format('      <skipped message="%s"/>\n', attr(msg))
end

local function testcase_xml(run, inst)
  local head = string.format('    <testcase name="%s" classname="%s" time="%s"',
    attr(inst.id), attr((run.name or "workflow") .. "." .. tostring(inst.step or inst.id)),
    seconds(inst.duration))
  if PASSED[inst.status] then return head .. "/>\n" end
  local body = FAILED[inst.status] and failure_xml(run, inst) or skipped_xml(inst)
  return head .. ">\n" .. body .. "    </testcase>\n"
end

local function properties_xml(run)
  local names = {}
  for k in pairs(run.params or {}) do names[#names + 1] = tostring(k) end
  if #names == 0 then return "" end
  table.sort(names)
  local out = {"    <properties>\n"}
  for _, k in ipairs(names) do
    out[#out + 1] = string.format('      <property name="param.%s" value="%s"/>\n',
      attr(k), attr(run.params[k]))
  end
  out[#out + 1] = "    </properties>\n"
  return table.concat(out)
end

local function suite_attrs(run)
  local c = counts(run)
  local duration = run.started_at and run.ended_at and run.ended_at - run.started_at
  -- JUnit timestamps are ISO 8601 without a zone; we write UTC.
  local stamp = os.date("!%Y-%m-%dT%H:%M:%S", math.floor(run.started_at or os.time()))
  return string.format('name="%s" tests="%d" failures="%d" errors="0" skipped="%d" time="%s" timestamp="%s"',
    attr(run.name or "workflow"), c.tests, c.failures, c.skipped, seconds(duration), stamp)
end

--- The junit.xml document as a string.
function M.render(run)
  local attrs = suite_attrs(run)
  local out = {'<?xml version="1.0" encoding="UTF-8"?>\n', "<testsuites ", attrs, ">\n",
               "  <testsuite ", attrs, ' hostname="', attr(run.hostname or require("smol.core").hostname()), '">\n',
               properties_xml(run)}
  for _, inst in ipairs(run.instances or {}) do out[#out + 1] = testcase_xml(run, inst) end
  out[#out + 1] = "  </testsuite>\n</testsuites>\n"
  return table.concat(out)
end

--- Writes run.report_dir/junit.xml (atomically; opts.mask hides the secrets); returns its path.
function M.write(run, opts)
  return reportdir.write_report(run, "junit.xml", M.render(run), opts and opts.mask)
end

return M
