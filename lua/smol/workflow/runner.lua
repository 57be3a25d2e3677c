-- Runs the instances of a validated workflow: one task per running
-- instance, at most `jobs` at once, failures skipping dependents and (unless
-- keep_going) cancelling the rest, retries with backoff, timeouts.
--
-- Ctrl-C (or TERM, HUP) works like a `finally`: the running steps are
-- cancelled (their processes killed), then the `always` steps still run,
-- for at most `grace` seconds; a second Ctrl-C cancels them too.
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

local ENDED_HOW = { failed = "failed", timed_out = "timed out", skipped = "was skipped",
  cancelled = "was cancelled" }

-- The reason to skip `inst` when a need of it ended without success.
local function skip_reason(S, inst, counting)
  for _, id in ipairs(inst.needs) do
    local need = S.by_id[id]
    if counting[need.status] and not need_ok(need) then
      -- No "skipped:" prefix: the status is recorded beside the message.
      return ("needs '%s', which %s"):format(id, ENDED_HOW[need.status] or need.status)
    end
  end
end

-- A skip the workflow asked for (a `when` that is false, ctx:skip), and
-- what only such skips kept from running, do not fail the run.
local function benign_skip(S, inst)
  local any = false
  for _, id in ipairs(inst.needs) do
    local need = S.by_id[id]
    if FINISHED[need.status] and not need_ok(need) then
      if not (need.status == "skipped" and need.skipped_by_condition) then return false end
      any = true
    end
  end
  return any
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

-- Once the run stops (a failure without keep_going, an interrupt),
-- unstarted instances are cancelled; `always` ones still run, unless a
-- second interrupt or the end of the grace period skipped them.
local function stopped_before_start(S, inst)
  return S.stopping and (not inst.always or S.always_reason ~= nil)
end

-- Decides a pending instance if it can be decided now: cancelled or skipped
-- (returns true: it finished) or queued to run.
local function decide(S, inst)
  local verdict, why
  if stopped_before_start(S, inst) then
    -- Dependents of the failure are skipped; the rest were cut short.
    why = skip_reason(S, inst, FAILED_OR_SKIPPED)
    verdict = why and "skip" or "cancel"
  else
    verdict, why = readiness(S, inst)
  end
  if verdict == "skip" then
    inst.skipped_by_condition = benign_skip(S, inst) or nil
    finish(S, inst, "skipped", why)
  elseif verdict == "cancel" then
    finish(S, inst, "cancelled", inst.always and S.always_reason or S.stop_reason)
  elseif verdict == "run" then
    inst.status, inst.queued_at = "queued", core.time()
    S.queue[#S.queue + 1] = inst
    notify(S, "step_queued", inst)
  end
  return verdict == "skip" or verdict == "cancel"
end

-- Decides the pending instances among `candidates` (in topological order),
-- then the dependents of those that finished without running. Only what an
-- event can change is looked at, so a long chain is not quadratic.
local function settle(S, candidates)
  local work, i = table.move(candidates, 1, #candidates, 1, {}), 1
  while i <= #work do
    local inst = work[i]
    i = i + 1
    if inst.status == "pending" and decide(S, inst) then
      table.move(S.dependents[inst.id], 1, #S.dependents[inst.id], #work + 1, work)
    end
  end
end

-- An instance's task: whatever happens, the driver hears that it ended
-- (a lost notification would leave the run waiting forever).
local function run_and_report(S, inst)
  local ok, err = xpcall(attempt_mod.run_instance, debug.traceback, S, inst)
  if not ok and not FINISHED[inst.status] then
    finish(S, inst, "failed", "internal error in the workflow engine: " .. tostring(err))
  end
  S.done:push(inst)
end

local function start_queued(S)
  while S.running < S.run.jobs and S.queue_head <= #S.queue do
    local inst = S.queue[S.queue_head]
    S.queue[S.queue_head], S.queue_head = false, S.queue_head + 1
    if inst.status == "queued" then
      S.running = S.running + 1
      -- Running from now on, so that a cancel reaches it before its task starts.
      inst.status, inst.started_at = "running", core.time()
      task.spawn(run_and_report, S, inst)
    end
  end
end

-- Cancels every running or queued instance but the `always` ones (with
-- `always_too`, those as well).
local function cancel_running(S, reason, always_too)
  for _, inst in ipairs(S.run.instances) do
    if inst.status == "running" and (always_too or not inst.always) then
      attempt_mod.cancel(S, inst, "cancelled", reason)
    end
  end
  for i = S.queue_head, #S.queue do
    local inst = S.queue[i]
    if inst.status == "queued" and (always_too or not inst.always) then
      finish(S, inst, "cancelled", reason)
    end
  end
end

local function stop(S, reason)
  if S.stopping then return end
  S.stopping, S.stop_reason = true, reason
  cancel_running(S, reason)
  settle(S, S.run.instances)
end

-- After a second interrupt, or once the grace period is over: the
-- `always` steps are cancelled too, and those not started never start.
local function skip_always(S, reason)
  if S.always_reason then return end
  S.always_reason = reason
  cancel_running(S, reason, true)
  settle(S, S.run.instances)
end

local function interrupt_reason(signal)
  if signal == "INT" then return "interrupted" end
  return "interrupted by SIG" .. signal
end

local function always_pending(S)
  for _, inst in ipairs(S.run.instances) do
    if inst.always and not FINISHED[inst.status] then return true end
  end
  return false
end

-- The first interrupt stops the run (the `always` steps still run, for
-- at most S.grace seconds); the next one skips the `always` steps too.
local function on_interrupt(S, signal)
  S.interrupts = S.interrupts + 1
  if S.interrupts > 1 then return skip_always(S, "interrupted again: `always` steps skipped") end
  S.interrupted_by = signal
  local reason = interrupt_reason(signal)
  stop(S, reason)
  cancel_running(S, reason)  -- also when a failure had stopped the run already
  local waiting = always_pending(S)
  if waiting then
    S.grace_timer = core.timer(S.grace, function()
      skip_always(S, ("the %gs grace period after the interrupt ran out"):format(S.grace))
      start_queued(S)
    end)
  end
  notify(S, "run_interrupted", signal, waiting and S.grace or nil)
  if S.on_interrupt then S.on_interrupt(S.run) end
end

local function on_finished(S, inst)
  S.running = S.running - 1
  if FAILED[inst.status] and not inst.continue_on_error and not S.keep_going then
    stop(S, ("step '%s' %s"):format(inst.id, inst.status == "timed_out" and "timed out" or "failed"))
  end
end

-- One turn of the driver: handles a caught interrupt, or waits for the
-- next finished instance; then starts what may start.
local function turn(S, signal)
  if signal then
    on_interrupt(S, signal)
  else
    local inst = S.done:pop()
    on_finished(S, inst)
    settle(S, S.dependents[inst.id])
  end
  start_queued(S)
end

local function first_turn(S)
  settle(S, S.run.instances)
  start_queued(S)
end

-- Runs fn(S, ...); returns the signal's name when Ctrl-C (TERM, HUP)
-- interrupted it. core.catch_interrupt makes the interrupt come only from
-- the wait, never from the middle of the engine's code. Inside a task (a
-- run started by a task) it is not caught: the host's exit path runs, and
-- the exit hook below (M.finalize_active) completes the run and its report.
local function guarded(fn, S, ...)
  if not core.catch_interrupt or task.in_task() then return fn(S, ...) end
  local ok, caught = core.catch_interrupt(fn, S, ...)
  if not ok then return caught end
end

local function result_of(S)
  for _, inst in ipairs(S.run.instances) do
    if FAILED[inst.status] and not inst.continue_on_error then return "failure" end
    if inst.status == "cancelled" then return "failure" end
    if inst.status == "skipped" and not inst.skipped_by_condition then return "failure" end
  end
  return "success"
end

local INTERRUPTED = "interrupted"
-- Seconds `always` steps get after an interrupt (--grace).
M.DEFAULT_GRACE = 30

-- Runs not yet finished, for the exit hook.
local active = {}

-- Completes a run cut short (Ctrl-C, or an error out of the engine): what
-- did not finish is cancelled, the run ends "cancelled", observers hear of
-- it and S.on_abort (the report writers) runs. Later activity of the run's
-- tasks, woken while sessions close, is ignored (S.finalized).
-- How the run was cut short: by os.exit in a step (that step failed, the
-- others were cancelled because of it) or else by an interrupt.
local function abort_cause(S)
  local request = require("smol.workflow.env").exit_request()
  if not request then return nil, INTERRUPTED end
  local culprit = request.task and attempt_mod.instance_of_task(S, request.task)
  local call = ("os.exit(%s)"):format(tostring(request.status))
  if not culprit then return nil, call .. " ended the run" end
  return culprit, ("step '%s' called %s"):format(culprit.id, call),
    ("called %s, which ends the whole run"):format(call)
end

local function finalize(S)
  S.finalized, S.finalizing, S.run.cut_short = true, true, true
  local culprit, reason, own = abort_cause(S)
  for _, inst in ipairs(S.run.instances) do
    if not FINISHED[inst.status] then
      local status, why = inst == culprit and "failed" or "cancelled", inst == culprit and own or reason
      attempt_mod.close_open_attempt(inst, status, why)
      finish(S, inst, status, why)
    end
  end
  S.run.ended_at, S.run.result = core.time(), culprit and "failure" or "cancelled"
  notify(S, "run_finished")
  S.finalizing = false
  if S.on_abort then S.on_abort(S.run) end
end

function M.finalize_active()
  for S in pairs(active) do
    active[S] = nil
    local ok, err = pcall(finalize, S)
    if not ok then S.warn("finishing the interrupted run failed: " .. tostring(err)) end
  end
end

-- Two registrations: task.at_exit hooks run last-registered first, and the
-- one made after the first session opened runs before the sandbox client's
-- hook closes the sessions (which would wake the steps with errors).
local hooked = {}
function M.ensure_exit_hook(stage)
  if hooked[stage] then return end
  hooked[stage] = true
  task.at_exit(M.finalize_active)
end

function M.drive(S)
  active[S] = true
  M.ensure_exit_hook("run")
  notify(S, "run_started")
  local signal = guarded(first_turn, S)
  while S.running > 0 or signal do signal = guarded(turn, S, signal) end
  if S.grace_timer then S.grace_timer:stop() end
  for _, err in ipairs(S.sessions:close_all()) do
    S.warn("closing a sandbox session failed: " .. err)
  end
  active[S] = nil
  S.run.ended_at = core.time()
  S.run.result = S.interrupted_by and "cancelled" or result_of(S)
  S.run.interrupted_by = S.interrupted_by
  notify(S, "run_finished")
  return S.run
end

-- The engine's state for one run; workflow.run adds defs, sandbox, sessions.
function M.new_state(run, opts)
  local by_id, dependents = {}, {}
  for _, inst in ipairs(run.instances) do
    by_id[inst.id], dependents[inst.id] = inst, {}
    for _, id in ipairs(inst.needs) do table.insert(dependents[id], inst) end
  end
  return {
    run = run, by_id = by_id, dependents = dependents, observers = opts.observers or {},
    keep_going = opts.keep_going == true, queue = {}, queue_head = 1, running = 0,
    done = task.queue(), private = {}, outputs = {}, observer_errors = {},
    stopping = false, stop_reason = "", interrupts = 0, grace = opts.grace or M.DEFAULT_GRACE,
    warn = opts.warn or function(msg) io.stderr:write("smolwf: ", msg, "\n") end,
  }
end

return M
