-- Workflow observer for `smolwf run --json`: one JSON object per line on
-- stdout for every observer call, for machines. Every event has `type`
-- (the observer method's name) and `time` (wall clock, epoch seconds);
-- step events have `step` (the instance id, e.g. "test[shard=2]").
-- Output chunks carry `text` when they are valid UTF-8, else `base64`
-- (the raw bytes), so no byte of a step's output is lost or mangled. Every
-- other string is valid UTF-8 (bad bytes become U+FFFD), and error and log
-- messages lose the colour escapes and control bytes a command wrote.
local core = require "smol.core"
local jsontext = require "smol.workflow.jsontext"

local M = {}

local Observer = {}
Observer.__index = Observer

-- Writes one event as one line; flushed at once so a reader sees it live.
-- "type" and "time" come first (cjson orders keys by hash), so a person
-- skimming the stream sees what each line is.
-- Output chunks come masked already (the engine masks them at the source);
-- every other event is masked here, as a whole line.
function Observer:emit(event)
  local head = string.format('{"type":%s,"time":%s', jsontext.encode(event.type), jsontext.encode(self.clock()))
  local masked = self.mask and event.type ~= "step_output"
  event.type = nil
  local rest = jsontext.encode(event)
  local line = head .. (rest == "{}" and "}" or "," .. rest:sub(2))
  if masked then line = self.mask:text(line) end
  self.out:write(line, "\n")
  self.out:flush()
end

local function step_list(run)
  local steps = {}
  for i, inst in ipairs(run.instances or {}) do
    steps[i] = {id = inst.id, name = inst.step, matrix = jsontext.plain(inst.matrix),
                needs = jsontext.array(inst.needs), timeout = inst.timeout}
  end
  return jsontext.array(steps)
end

function Observer:run_started(run)
  self:emit{type = "run_started", run = run.name, started_at = run.started_at, jobs = run.jobs,
            params = jsontext.plain(run.params or {}), report_dir = run.report_dir, steps = step_list(run)}
end

function Observer:step_queued(_, inst)
  self:emit{type = "step_queued", step = inst.id, name = inst.step, matrix = jsontext.plain(inst.matrix)}
end

function Observer:step_started(_, inst, attempt_no)
  self:emit{type = "step_started", step = inst.id, attempt = attempt_no}
end

function Observer:step_output(_, inst, stream, chunk)
  local event = {type = "step_output", step = inst.id, stream = stream}
  if utf8.len(chunk) then event.text = chunk else event.base64 = core.b64encode(chunk) end
  self:emit(event)
end

function Observer:step_log(_, inst, message)
  self:emit{type = "step_log", step = inst.id, message = jsontext.message(message)}
end

function Observer:step_retry(_, inst, attempt_no, delay, err)
  self:emit{type = "step_retry", step = inst.id, attempt = attempt_no, delay = delay,
            error = err ~= nil and jsontext.message(err) or nil}
end

function Observer:step_finished(_, inst)
  self:emit{type = "step_finished", step = inst.id, status = inst.status,
            duration = inst.duration, attempts = inst.attempts and #inst.attempts or 0,
            exit_code = inst.exit_code, error = inst.error ~= nil and jsontext.message(inst.error) or nil,
            cache = inst.cache and inst.cache.status, cache_key = inst.cache and inst.cache.key}
end

function Observer:run_interrupted(_, signal, grace)
  self:emit{type = "run_interrupted", signal = signal, grace = grace}
end

-- What a sandbox session really got (profile, isolation, network), as the
-- engine recorded it when it opened.
function Observer:session_opened(_, info)
  self:emit{type = "session_opened", session = jsontext.plain(info)}
end

-- A pool's providers as placement sees them: index, node, slots, busy, alive, lost.
function Observer:pool_started(_, providers)
  self:emit{type = "pool_started", providers = jsontext.plain(providers)}
end

-- Only losses: every slot taken or given back would flood the stream
-- (step_placed says where each step runs).
function Observer:pool_changed(_, what, provider)
  if what ~= "lost" then return end
  self:emit{type = "provider_lost", provider = provider.index, node = provider.node,
            error = jsontext.message(provider.lost)}
end

function Observer:step_placed(_, inst, placement)
  self:emit{type = "step_placed", step = inst.id, provider = placement.provider, node = placement.node}
end

function Observer:step_moved(_, inst, why)
  self:emit{type = "step_moved", step = inst.id, error = jsontext.message(why)}
end

local function count_statuses(run)
  local counts = {}
  for _, inst in ipairs(run.instances or {}) do
    counts[inst.status] = (counts[inst.status] or 0) + 1
  end
  return counts
end

function Observer:run_finished(run)
  local duration = run.ended_at and run.started_at and run.ended_at - run.started_at
  self:emit{type = "run_finished", run = run.name, result = run.result, duration = duration,
            report_dir = run.report_dir, counts = count_statuses(run)}
end

--- A new event-stream observer.
--- opts.out: where lines go (anything with write and flush; default io.stdout)
--- opts.clock: function returning the event time (default core.time)
--- opts.mask: the run's masker (smol.workflow.mask): secrets hidden
function M.new(opts)
  opts = opts or {}
  return setmetatable({out = opts.out or io.stdout, clock = opts.clock or core.time, mask = opts.mask}, Observer)
end

return M
