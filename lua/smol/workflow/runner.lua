-- Runs the instances of a validated workflow: one task per running
-- instance, at most `jobs` at once, failures skipping dependents and (unless
-- keep_going) cancelling the rest, retries with backoff, timeouts.
--
-- The run table (see the "Workflow run data model" contract) is public and
-- read by observers; the engine's own state lives in `S` and `S.private`.
local task = require "smol.task"
local core = require "smol.core"
local attempt_mod = require "smol.workflow.attempt"
local observe = require "smol.workflow.observe"

local M = {}

local FINISHED = { success = true, failed = true, skipped = true, cancelled = true, timed_out = true }
local FAILED = { failed = true, timed_out = true }

local notify, finish = observe.notify, observe.finish

-- A need is satisfied when it succeeded, or failed with continue_on_error.
local function need_ok(need)
  return need.status == "success" or (FAILED[need.status] and need.continue_on_error)
end

-- The reason to skip `inst` when a need of it ended without success.
local function skip_reason(S, inst, counting)
  for _, id in ipairs(inst.needs) do
    local need = S.by_id[id]
    if counting[need.status] and not need_ok(need) then
      return ("skipped: needs '%s', which %s"):format(id,
        need.status == "skipped" and "was skipped" or ("ended " .. need.status))
    end
  end
end

local ANY_END = FINISHED
local FAILED_OR_SKIPPED = { failed = true, timed_out = true, skipped = true }

-- "wait", "run" or "skip", with the reason for a skip.
local function readiness(S, inst)
  for _, id in ipairs(inst.needs) do
    if not FINISHED[S.by_id[id].status] then return "wait" end
  end
  if inst.always then return "run" end
  local why = skip_reason(S, inst, ANY_END)
  if why then return "skip", why end
  return "run"
end

-- Once the run stops (a failure without keep_going, or an interrupt),
-- unstarted instances are cancelled; `always` ones still run after a failure.
local function stopped_before_start(S, inst)
  return S.interrupted or (S.stopping and not inst.always)
end

-- Decides every pending instance that can be decided now (topological order
-- makes one pass enough: a skip is visible to the instances after it).
local function settle(S)
  for _, inst in ipairs(S.run.instances) do
    if inst.status == "pending" then
      if stopped_before_start(S, inst) then
        -- Dependents of the failure are skipped; the rest were cut short.
        local why = skip_reason(S, inst, FAILED_OR_SKIPPED)
        if why then finish(S, inst, "skipped", why)
        else finish(S, inst, "cancelled", "cancelled: " .. S.stop_reason) end
      else
        local verdict, why = readiness(S, inst)
        if verdict == "skip" then
          finish(S, inst, "skipped", why)
        elseif verdict == "run" then
          inst.status, inst.queued_at = "queued", core.time()
          S.queue[#S.queue + 1] = inst
          notify(S, "step_queued", inst)
        end
      end
    end
  end
end

local function start_queued(S)
  while S.running < S.run.jobs and #S.queue > 0 do
    local inst = table.remove(S.queue, 1)
    if inst.status == "queued" then
      S.running = S.running + 1
      -- Running from now on, so that a cancel reaches it before its task starts.
      inst.status, inst.started_at = "running", core.time()
      task.spawn(function()
        attempt_mod.run_instance(S, inst)
        S.done:push(inst)
      end)
    end
  end
end

-- Cancels every running instance (not `always` ones after a mere failure).
local function cancel_running(S, reason)
  for _, inst in ipairs(S.run.instances) do
    if inst.status == "running" and (S.interrupted or not inst.always) then
      attempt_mod.cancel(S, inst, "cancelled", reason)
    end
  end
  for _, inst in ipairs(S.queue) do
    if inst.status == "queued" and (S.interrupted or not inst.always) then
      finish(S, inst, "cancelled", "cancelled: " .. reason)
    end
  end
end

local function stop(S, reason)
  if S.stopping and not S.interrupted then return end
  S.stopping, S.stop_reason = true, reason
  cancel_running(S, reason)
end

local function on_finished(S, inst)
  S.running = S.running - 1
  if FAILED[inst.status] and not inst.continue_on_error and not S.keep_going then
    stop(S, ("step '%s' %s"):format(inst.id, inst.status == "timed_out" and "timed out" or "failed"))
  end
end

local function is_interrupt(err)
  return type(err) == "table" and err.code == "interrupted"
end

-- Waits for the next finished instance. Ctrl-C (the interrupt error raised
-- by the loop) cancels everything; the loop keeps draining until every
-- running instance has ended, so the report is still complete.
local function next_finished(S)
  while true do
    local ok, inst = pcall(S.done.pop, S.done)
    if ok then return inst end
    if not is_interrupt(inst) then
      S.fatal = S.fatal or inst
      S.interrupted = true
      stop(S, "engine error: " .. tostring(inst))
    else
      S.interrupted = true
      stop(S, "interrupted")
    end
  end
end

local function result_of(S)
  if S.interrupted then return "cancelled" end
  for _, inst in ipairs(S.run.instances) do
    if FAILED[inst.status] and not inst.continue_on_error then return "failure" end
    if inst.status == "cancelled" or inst.status == "skipped" then return "failure" end
  end
  return "success"
end

function M.drive(S)
  notify(S, "run_started")
  settle(S)
  start_queued(S)
  while S.running > 0 do
    on_finished(S, next_finished(S))
    settle(S)
    start_queued(S)
  end
  for _, err in ipairs(S.sessions:close_all()) do
    io.stderr:write("smolwf: closing a sandbox session failed: " .. err .. "\n")
  end
  S.run.ended_at = core.time()
  S.run.result = result_of(S)
  notify(S, "run_finished")
  if S.fatal then error(S.fatal, 0) end
  return S.run
end

-- The engine's state for one run; workflow.run adds defs, sandbox, sessions.
function M.new_state(run, opts)
  local by_id = {}
  for _, inst in ipairs(run.instances) do by_id[inst.id] = inst end
  return {
    run = run, by_id = by_id, observers = opts.observers or {},
    keep_going = opts.keep_going == true, queue = {}, running = 0,
    done = task.queue(), private = {}, outputs = {}, observer_errors = {},
    stopping = false, interrupted = false, stop_reason = "",
  }
end

return M
