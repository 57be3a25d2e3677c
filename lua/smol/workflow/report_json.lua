-- report.json: the run (name, start, end, result) and every step instance
-- (status, attempts, exit code, duration, timeout, error, artifact and log
-- paths) for machines. Times are wall-clock epoch seconds (floats);
-- durations are seconds; paths are relative to the report directory.
-- Optional values are present as null, lists as [] when empty, so a reader
-- can rely on every key.
local jsontext = require "smol.workflow.jsontext"
local reportdir = require "smol.workflow.reportdir"

local M = {}
M.FORMAT_VERSION = 1

local opt, array = jsontext.opt, jsontext.array

local message = jsontext.message

local function attempt_json(a)
  local duration = a.started_at and a.ended_at and a.ended_at - a.started_at
  return {started_at = opt(a.started_at), ended_at = opt(a.ended_at), duration = opt(duration),
          status = opt(a.status), exit_code = opt(a.exit_code), error = message(a.error),
          -- on a pool: where it ran, and why it ended there when its provider was lost
          placement = opt(a.placement and jsontext.plain(a.placement)), lost = opt(a.lost)}
end

-- Only logs that exist: a skipped step never wrote any.
local function logs_json(run, inst)
  local logs = {}
  for stream, rel in pairs(inst.logs or {}) do
    if reportdir.exists(reportdir.join(run.report_dir, rel)) then logs[stream] = rel end
  end
  return logs
end

-- The step's return value when JSON can say it exactly; else null and why.
local function value_json(inst)
  if inst.value == nil then return jsontext.null, jsontext.null end
  local value, why = jsontext.exact(inst.value)
  if value == nil then return jsontext.null, "not JSON-representable: " .. why end
  return value, jsontext.null
end

local function instance_json(run, inst)
  local value, value_note = value_json(inst)
  local attempts = {}
  for i, a in ipairs(inst.attempts or {}) do attempts[i] = attempt_json(a) end
  return {
    id = inst.id, step = inst.step, matrix = opt(jsontext.plain(inst.matrix)), needs = array(inst.needs),
    status = inst.status, queued_at = opt(inst.queued_at), started_at = opt(inst.started_at),
    ended_at = opt(inst.ended_at), duration = opt(inst.duration), attempts = array(attempts),
    exit_code = opt(inst.exit_code), timeout = opt(inst.timeout), error = message(inst.error),
    continue_on_error = inst.continue_on_error or false, always = inst.always or false,
    artifacts = array(inst.artifacts), logs = logs_json(run, inst),
    sandbox = opt(jsontext.plain(inst.sandbox)), value = value, value_note = value_note,
    -- The step cache: {status = "hit"/"miss"/"uncacheable", key, changed, reason, note, stored}.
    cache = opt(inst.cache and jsontext.plain(inst.cache)),
    resumed_from = opt(inst.resumed_from),
    -- On a pool: {provider = N, node = NAME}, and how often a lost provider made it run again.
    placement = opt(inst.placement and jsontext.plain(inst.placement)), infra_retries = opt(inst.infra_retries),
    -- Outputs of needed steps moved here from other providers: [{step, from, entries, bytes, via}].
    moved_in = opt(inst.moved_in and jsontext.plain(inst.moved_in)),
    -- Bytes of the oldest output each log dropped to stay under its cap.
    logs_dropped = opt(inst.log_dropped and jsontext.plain(inst.log_dropped)),
  }
end

--- The report as a Lua table ready for JSON encoding.
function M.build(run)
  local instances = {}
  for i, inst in ipairs(run.instances or {}) do instances[i] = instance_json(run, inst) end
  local duration = run.started_at and run.ended_at and run.ended_at - run.started_at
  return {
    format_version = M.FORMAT_VERSION, name = run.name, result = opt(run.result),
    started_at = opt(run.started_at), ended_at = opt(run.ended_at), duration = opt(duration),
    params = jsontext.plain(run.params or {}), jobs = opt(run.jobs), instances = array(instances),
    -- The session the steps shared (profile, isolation, network), null
    -- until the engine records it; a step with its own has inst.sandbox.
    sandbox = opt(jsontext.plain(run.sandbox)),
    -- The report directory of the run this one resumed (--resume), or null.
    resumed_from = opt(run.resumed_from),
    -- The pool the steps were placed on: {providers = [{index, node, slots, alive, lost}], allocation}.
    pool = opt(run.pool and jsontext.plain(run.pool)),
  }
end

--- Writes run.report_dir/report.json (atomically; opts.mask hides the secrets); returns its path.
function M.write(run, opts)
  return reportdir.write_report(run, "report.json", jsontext.encode(M.build(run)) .. "\n", opts and opts.mask)
end

return M
