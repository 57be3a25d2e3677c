-- One instance's life: its `when` condition, then the result a resumed run
-- reuses, or the step cache's (smol.workflow.step_cache), or its attempts
-- (each in its own task, so that a timeout or a cancel stops the step's
-- code and, through the sandbox client, kills its processes) with retries
-- and backoff; and its final status.
local task = require "smol.task"
local core = require "smol.core"
local context = require "smol.workflow.context"
local bridge = require "smol.workflow.bridge"
local placement = require "smol.workflow.placement"
local observe = require "smol.workflow.observe"
local text = require "smol.workflow.text"
local plan = require "smol.workflow.plan"
local step_cache = require("smol.lazy")("smol.workflow.step_cache")   -- only for runs with a cache

local M = {}

local function private(S, inst)
  local p = S.private[inst]
  if not p then p = {}; S.private[inst] = p end
  return p
end

-- Asks a running instance to stop: its current attempt's task is cancelled
-- and a pending backoff sleep ends. `kind` is "cancelled" or "timed_out".
function M.cancel(S, inst, kind, reason)
  local p = private(S, inst)
  if kind == "cancelled" then p.cancel_reason = p.cancel_reason or reason end
  if p.task and not p.task:done() then p.task:cancel(reason) end
  if p.wake then p.wake:set() end
end

-- ctx.inputs: the needed steps' return values by step name; for a matrix
-- step, a table of its instances' values keyed by instance id.
local function inputs_of(S, inst)
  local inputs = {}
  for _, id in ipairs(inst.needs) do
    local need = S.by_id[id]
    if need.matrix then
      inputs[need.step] = inputs[need.step] or {}
      inputs[need.step][id] = S.outputs[id]
    else
      inputs[need.step] = S.outputs[id]
    end
  end
  return inputs
end

-- What an absent table reads as (never written: no table made per step).
local NONE = {}

-- The environment of every command of the step: the run's (secrets, the
-- workflow's env), then the step's own env, which wins.
function M.step_env(S, inst)
  local env = {}
  for k, v in pairs(S.base_env or NONE) do env[k] = v end
  for k, v in pairs(S.defs[inst.id].env or NONE) do env[k] = v end
  return env
end

-- ctx.params of a cached step: the run's parameters, each one the step
-- reads noted in `reads` (those are part of its result's key).
local function recording_params(params, reads)
  return setmetatable({}, {
    __index = function(_, k) reads[k] = true; return params[k] end,
    __pairs = function()
      for k in pairs(params) do reads[k] = true end
      return next, params, nil
    end,
    __newindex = function() error("ctx.params is read-only", 2) end,
  })
end

local function new_context(S, inst, n)
  local params, reads = S.params or S.run.params, private(S, inst).params_read
  if reads and n > 0 then params = recording_params(params, reads) end
  return context.new(bridge.new(S, inst), {
    inputs = inputs_of(S, inst), matrix = inst.matrix, params = params,
    env = M.step_env(S, inst), secrets = S.secrets, step = inst.step, id = inst.id, attempt = n,
    report_dir = S.run.report_dir,
  })
end

-- The exit code a failure is about: the failed command's; none when the
-- provider itself died (its own exit status says nothing about the
-- command); else the last command's.
local function failure_exit_code(err, inst)
  if type(err) ~= "table" then return inst.exit_code end
  if err.code == "provider_exited" then
    inst.exit_code = nil
    return nil
  end
  if math.type(err.exit_code) == "integer" then return err.exit_code end
  return inst.exit_code
end

-- What the retry predicate and the report see of a failed attempt.
local function failure_info(status, err, inst, n)
  return {
    status = status, attempt = n, error = err,
    message = status == "timed_out" and ("timed out after %gs"):format(inst.timeout) or text.message(err),
    exit_code = failure_exit_code(err, inst), timed_out = status == "timed_out",
    stderr = type(err) == "table" and err.stderr or nil,
  }
end

-- The message is the reason alone: the status is recorded beside it.
local function cancelled(p)
  return { status = "cancelled", message = p.cancel_reason }
end

-- The instance whose current attempt runs in task `t`, if any.
function M.instance_of_task(S, t)
  for inst, p in pairs(S.private) do
    if p.task == t then return inst end
  end
end

-- An attempt whose task never ended (the run was interrupted) is closed as
-- `status`, so that no report shows it running after the run ended.
function M.close_open_attempt(inst, status, message)
  local record = inst.attempts[#inst.attempts]
  if record and record.status == "running" then
    record.status, record.ended_at, record.error = status, core.time(), message
  end
end

local function classify(p, ok, value, inst, n)
  if p.cancel_reason then
    return cancelled(p)
  elseif p.timed_out then
    return failure_info("timed_out", value, inst, n)
  elseif not ok and type(value) == "table" and value.code == "interrupted" then
    -- Ctrl-C reached the step's own code: the runner cancels the run.
    return { status = "cancelled", message = "interrupted" }
  elseif not ok and context.is_skip(value) then
    return { status = "skipped", message = value.message }
  elseif not ok then
    return failure_info("failed", value, inst, n)
  end
  return { status = "success", value = value }
end

local HOOK_INSTRUCTIONS = 10000
-- The timer cancels a step on time whenever the loop runs; the hook only
-- acts once the deadline is this far behind, i.e. when the step's Lua code
-- starves the loop. It must not fire while the cancelled step is still
-- running the sandbox client's cleanup (the kill of its process).
local HOOK_GRACE = 0.25

-- Calls run(ctx). With a deadline, a count hook also stops pure-Lua code
-- that never yields (the timeout timer cannot fire while it hogs the loop).
-- Once it fired the hook re-arms on every line, so a pcall in the step
-- cannot swallow the timeout (STYLE.md pattern 11); it never raises in this
-- function's own lines, so the hook is always removed before returning.
local function guarded_run(run, ctx, deadline, p)
  if not deadline then return run(ctx) end
  local function hook()
    if debug.getinfo(2, "f").func == guarded_run then return end
    if p.hook_fired or core.now() >= deadline + HOOK_GRACE then
      p.hook_fired, p.timed_out = true, true
      debug.sethook(hook, "l")
      error({ code = "timeout", message = "step timed out" }, 0)
    end
  end
  p.hook_fired = false
  debug.sethook(hook, "", HOOK_INSTRUCTIONS)
  local result = table.pack(pcall(run, ctx))
  debug.sethook()
  if not result[1] then error(result[2], 0) end
  return table.unpack(result, 2, result.n)
end

-- Runs the step's function once, in its own task, under the step's timeout.
local function run_attempt(S, inst, n)
  local p = private(S, inst)
  local record = { started_at = core.time(), status = "running", placement = inst.placement }
  -- appended: after a lost provider the attempts start again at 1 elsewhere
  inst.attempts[#inst.attempts + 1] = record
  observe.notify(S, "step_started", inst, n)
  local ctx = new_context(S, inst, n)
  p.timed_out = false
  -- (no locals for the run function and the deadline: fewer live slots down to the join, see run_instance)
  local t = task.spawn(guarded_run, S.defs[inst.id].run, ctx, inst.timeout and core.now() + inst.timeout, p)
  p.task = t
  local timer = inst.timeout and core.timer(inst.timeout, function()
    p.timed_out = true
    M.cancel(S, inst, "timed_out", ("timed out after %gs"):format(inst.timeout))
  end)
  local ok, value = pcall(t.join, t)
  if timer then timer:stop() end
  p.task = nil
  context.finish(ctx)
  local outcome = classify(p, ok, value, inst, n)
  if S.masker and outcome.message then outcome.message = S.masker:text(outcome.message) end
  record.ended_at, record.status = core.time(), outcome.status
  record.error, record.exit_code = outcome.message, outcome.exit_code or inst.exit_code
  return outcome
end

local function retry_wanted(retry, outcome)
  if not retry.when then return true end
  local ok, wanted = pcall(retry.when, outcome)
  if not ok then return false, "retry.when raised: " .. tostring(wanted) end
  return wanted and true or false
end

-- Sleeps `delay` seconds unless the instance is cancelled meanwhile.
local function backoff_sleep(p, delay)
  if delay <= 0 then return end
  local wake = task.event()
  p.wake = wake
  local timer = core.timer(delay, function() wake:set() end)
  wake:wait()
  timer:stop()
  p.wake = nil
end

-- Failures no retry can change: the request is not in the recording.
local NEVER_RETRIED = { replay_mismatch = true }

local function should_stop(p, retry, outcome, n)
  if outcome.status ~= "failed" and outcome.status ~= "timed_out" then return true end
  if type(outcome.error) == "table" and NEVER_RETRIED[outcome.error.code] then return true end
  if n >= (retry.attempts or 1) or p.cancel_reason then return true end
  local wanted, why = retry_wanted(retry, outcome)
  if why then outcome.message = outcome.message .. "\n" .. why end
  return not wanted
end

-- Why an attempt is retried, short (the full message is in the attempt's
-- record): "exit code 75", "timed out after 2s", or the error's first line.
local function retry_note(outcome)
  if outcome.status == "timed_out" then return outcome.message end
  local err = outcome.error
  if type(err) == "table" and err.code == "command_failed" then
    return err.signal and ("killed by signal " .. err.signal) or ("exit code " .. tostring(err.exit_code))
  end
  return (outcome.message:match("^[^\n]*"))
end

-- Runs fn(...) in a task of its own, which a cancel of the instance
-- reaches (it may wait on the session); returns pcall's results.
local function in_own_task(S, inst, fn, ...)
  local p = private(S, inst)
  local t = task.spawn(fn, ...)
  p.task = t
  local results = table.pack(pcall(t.join, t))
  p.task = nil
  return table.unpack(results, 1, results.n)
end

-- Evaluates the step's `when` (or `if`) in its own task (it may run
-- commands; a cancel reaches it): nil when the step is to run, else the
-- outcome (skipped with the reason, or failed when it raised).
local function condition_outcome(S, inst)
  local def = S.defs[inst.id]
  local cond, name = def.when or def["if"], def.when and "when" or "if"
  if not cond or private(S, inst).cancel_reason then return nil end
  local p, ctx = private(S, inst), new_context(S, inst, 0)
  local ok, verdict, reason = in_own_task(S, inst, cond, ctx)
  context.finish(ctx)
  if p.cancel_reason then return cancelled(p) end
  if not ok and context.is_skip(verdict) then return { status = "skipped", message = verdict.message } end
  if not ok then return { status = "failed", message = ("`%s` raised: %s"):format(name, text.message(verdict)) } end
  if verdict then return nil end
  return { status = "skipped", message = type(reason) == "string" and reason or ("`%s` returned %s"):format(name, tostring(verdict)) }
end

-- The attempts, retried as the step says, until one needs no retry.
local function run_attempts(S, inst)
  local p, retry = private(S, inst), S.defs[inst.id].retry or NONE
  local outcome, n = nil, 0
  while not outcome do
    n = n + 1
    outcome = run_attempt(S, inst, n)
    if outcome.status == "failed" and placement.lost_during(S, inst, outcome, inst.attempts[#inst.attempts]) then
      return outcome
    end
    if not should_stop(p, retry, outcome, n) then
      local delay = (retry.backoff or 0) * 2 ^ (n - 1)
      observe.notify(S, "step_retry", inst, n + 1, delay, retry_note(outcome))
      backoff_sleep(p, delay)
      outcome = p.cancel_reason and cancelled(p) or nil
    end
  end
  return outcome
end

-- The outcome of a cache operation that raised: cancelled, or failed naming it.
local function cache_failure(S, inst, what, err)
  local p = private(S, inst)
  if p.cancel_reason then return cancelled(p) end
  return { status = "failed", message = ("the step cache could not %s: %s"):format(what, text.message(err)), error = err }
end

-- Runs the instance through the step cache: a hit is its outcome; else it
-- runs and a success is stored.
local function run_cached(S, inst)
  local b = bridge.new(S, inst)
  private(S, inst).params_read = {}
  local ok, hit, state = in_own_task(S, inst, step_cache.lookup, S, inst, b, M.step_env(S, inst), bridge.session_spec(S, inst))
  if not ok then return cache_failure(S, inst, "look the step up", hit) end
  if hit then return hit end
  local outcome = run_attempts(S, inst)
  if outcome.status ~= "success" or not state then return outcome end
  local stored, failure = in_own_task(S, inst, step_cache.store, S, inst, state, outcome.value, b,
    private(S, inst).params_read)
  if not stored then return cache_failure(S, inst, "store the result", failure) end
  return failure or outcome
end

-- An instance a resumed run takes over from the earlier run: its outputs
-- put back from the step cache, its return value as it was.
local function reused(S, inst, record)
  local resume = require "smol.workflow.resume"
  if record.key then
    S.cache:restore(assert(S.cache:lookup(record.key)), bridge.new(S, inst):session())
    S.cache_keys[inst.id], S.used_keys[record.key] = record.key, true
    inst.cache = { status = "reused", key = record.key }
  end
  inst.resumed_from = S.run.resumed_from:gsub("/+$", ""):match("[^/]*$")
  return { status = "success", value = resume.value(record) }
end

local function reuse_outcome(S, inst)
  local ok, outcome = in_own_task(S, inst, reused, S, inst, S.reuse[inst.id])
  if ok then return outcome end
  return cache_failure(S, inst, "put back the outputs of the resumed run", outcome)
end

-- The outcome of a started instance: reused, skipped by its condition,
-- from the cache or from its attempts.
local function started_outcome(S, inst)
  local outcome = (S.reuse and S.reuse[inst.id] and reuse_outcome(S, inst)) or condition_outcome(S, inst)
  if outcome then return outcome end
  if S.cache and plan.cacheable(S.defs[inst.id]) then return run_cached(S, inst) end
  if S.explain then step_cache.explain_uncached(S, inst) end
  return run_attempts(S, inst)
end

-- Once the instance has its outcome where it ran: the message names an
-- undeclared file of another provider, and an own session ends with its
-- instance (placed again, it opens afresh).
local function after_outcome(S, inst, outcome)
  placement.explain_missing(S, inst, outcome)
  local key = bridge.own_key(S, inst)
  if key then
    local err = S.sessions:close(key)
    if err then S.warn(("closing the session of %s failed: %s"):format(inst.id, err)) end
  end
end

-- The side of a placed instance (see placement.run).
local function placed_side(S, inst)
  return {
    outcome = function()
      local outcome = started_outcome(S, inst)
      after_outcome(S, inst, outcome)
      return outcome
    end,
    in_own_task = function(fn, ...) return in_own_task(S, inst, fn, ...) end,
    session = function() return bridge.new(S, inst):session() end,
    session_key = function() return bridge.session_key(S, inst) end,
  }
end

-- Each instance runs in a fresh coroutine, whose stack grows (a
-- reallocation) once the calls down to the attempt's join go deep: without
-- a pool, the outcome comes from as few calls as it can (started_outcome
-- tail-calls the attempts).
function M.run_instance(S, inst)
  local p = private(S, inst)
  local outcome
  if p.cancel_reason then
    outcome = cancelled(p)
  elseif S.pool then
    outcome = placement.run(S, inst, placed_side(S, inst))
  else
    outcome = started_outcome(S, inst)
    after_outcome(S, inst, outcome)
  end
  if outcome.status == "cancelled" and p.cancel_reason then outcome = cancelled(p) end
  S.outputs[inst.id] = outcome.value
  inst.value = outcome.value
  if outcome.status == "skipped" then inst.skipped_by_condition = true end
  if outcome.status ~= "success" then inst.exit_code = outcome.exit_code or inst.exit_code end
  inst.error_code = type(outcome.error) == "table" and type(outcome.error.code) == "string"
    and outcome.error.code or nil
  observe.finish(S, inst, outcome.status, outcome.message)
end

return M
