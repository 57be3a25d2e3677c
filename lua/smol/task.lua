--[[
smol.task: cooperative tasks (coroutines) scheduled over smol.core's loop.

Policy lives here, mechanism in C: loop callbacks never resume a coroutine
themselves, they only mark a task ready (wake); the scheduler resumes ready
tasks between loop iterations. A primitive that waits yields when called
inside one of our tasks and otherwise drives the loop (core.run_once) until
the awaited thing is ready, running ready tasks meanwhile.

task.in_task() is true only inside coroutines started by task.spawn (a
weak-keyed set), never merely because the code is yieldable: busted and
user code may run us inside coroutines of their own.
]]
local core = require "smol.core"

--[[
One scheduler per host, whatever package.loaded says: busted insulates each
spec file and drops the modules it loaded, so a later require would build a
second scheduler with its own ready queue and exit hooks. The instance lives
in the registry, where the host also finds it at exit (exitpath.c).
]]
local REGISTRY_KEY = "smol.task"
local registry = debug.getregistry()
if registry[REGISTRY_KEY] then return registry[REGISTRY_KEY] end

local M = {}

local SUSPEND = setmetatable({}, {__name = "smol.task.SUSPEND"}) -- yielded by our waits
local WAKE, CANCEL = {}, {}                                       -- what a wait is resumed with
local WAKE_VALUES = {WAKE, n = 1}  -- shared: a wake allocates nothing (values are only read)

-- Resumes a task's coroutine; core.resume also lets Ctrl-C stop it while it
-- runs (a task spinning in Lua), at no cost to the Lua code it runs.
local resume = core.resume or coroutine.resume

local task_of = setmetatable({}, {__mode = "k"}) -- coroutine -> task
local live = {}        -- tasks not yet done (the host waits for them at exit)
local unjoined = {}    -- failed tasks nobody joined yet, in order of failure
local exit_hooks = {}

-- {=================== errors ===================}

local cancelled_mt = {__tostring = function(e) return "cancelled: " .. e.message end}

local function cancelled_error(reason)
  return setmetatable({code = "cancelled", message = reason or "task cancelled"}, cancelled_mt)
end

local function is_code(err, code)
  return type(err) == "table" and err.code == code
end

-- A readable one-line description of any error value.
local function describe(err)
  if type(err) == "string" then return err end
  local mt = getmetatable(err)
  if mt and mt.__tostring then return tostring(err) end
  if type(err) == "table" and err.message then return tostring(err.message) end
  return "(error object is a " .. type(err) .. " value)"
end

-- {=================== the ready queue ===================}

-- ready_values[i]: what task i is resumed with, a table.pack'ed list or false (nothing)
local ready_tasks, ready_values = {}, {}
local ready_head, ready_tail = 1, 0

local function schedule(t, values)
  ready_tail = ready_tail + 1
  ready_tasks[ready_tail] = t
  ready_values[ready_tail] = values or false
end

local function has_ready()
  return ready_head <= ready_tail
end

local Task = {}
Task.__index = Task
Task.__name = "smol.task"

local function running_task()
  return task_of[coroutine.running()]
end

-- {=================== finishing and stepping ===================}

local function wake(t)
  if t.status ~= "suspended" then return end
  t.status = "ready"
  t.cleanup, t.cleanup_arg = nil, nil
  schedule(t, WAKE_VALUES)
end

local function wake_all(list)
  if list == nil then return end          -- nobody ever waited (lists are made on first wait)
  for i = 1, #list do
    wake(list[i])
    list[i] = nil
  end
end

local function finish(t, ok, ...)
  t.status = "done"
  t.ok = ok
  if ok then t.results = table.pack(...) else t.err = ... end
  live[t] = nil
  if not ok and not t.joined and not (t.cancelled and is_code(t.err, "cancelled")) then
    unjoined[#unjoined + 1] = t
  end
  wake_all(t.joiners)
  if t.on_done then t.on_done(t) end
end

-- (SUSPEND first: the common case, and a finished task's first value is xpcall's boolean)
local function after_resume(t, resumed, ...)
  if not resumed then                      -- an error outside the task's xpcall
    return finish(t, false, ...)
  elseif ... == SUSPEND then
    t.status = "suspended"
  elseif coroutine.status(t.co) == "dead" then
    return finish(t, ...)                  -- xpcall's ok, then results or the error
  else                                     -- a plain coroutine.yield(): run again next turn
    t.status = "ready"
    schedule(t, false)
  end
end

local function step(t, values)
  if t.status == "done" then return end
  t.status = "running"
  if values == WAKE_VALUES then
    after_resume(t, resume(t.co, WAKE))
  elseif values then
    after_resume(t, resume(t.co, table.unpack(values, 1, values.n)))
  else
    after_resume(t, resume(t.co))
  end
end

-- One scheduler turn: the tasks ready now (those readied meanwhile run next turn).
local function run_ready()
  local last = ready_tail
  while ready_head <= last do
    local t, values = ready_tasks[ready_head], ready_values[ready_head]
    ready_tasks[ready_head], ready_values[ready_head] = nil, nil
    ready_head = ready_head + 1
    step(t, values)
  end
end

--[[
Drives the loop outside any task until ready(obj) is true. With nothing
ready, nothing in the loop and ready(obj) still false, nothing can ever
wake us: that is a deadlock, raised rather than spinning or hanging.
(ready and obj, not a closure: a wait allocates nothing of its own.)
known_not_ready: the caller just found ready(obj) false (one look saved).
Tasks still ready after a turn (they yielded plainly) must not starve
the loop: it is polled without blocking before they run again; with none
ready, the next run_once polls (and blocks) anyway.
]]
local function drive(ready, obj, what, known_not_ready)
  if not known_not_ready and ready(obj) then return end
  repeat
    if ready_head <= ready_tail then   -- has_ready(), inline: this loop is every blocking wait's
      run_ready()
      if has_ready() and not ready(obj) then core.run_nowait() end
    elseif not core.run_once() and not has_ready() and not ready(obj) then
      error("deadlock: waiting for " .. what .. ", but nothing is left that could wake it", 0)
    end
  until ready(obj)
end

--[[
Suspends task t until wake(t) or a cancel. cleanup(arg, t) undoes whatever
registration would wake it (removes it from a waiter list, stops a timer);
a cancel runs it and makes this raise the cancelled error.
]]
local function suspend(t, cleanup, arg)
  local pending = t.cancel_err
  if pending then
    t.cancel_err = nil
    cleanup(arg, t)
    error(pending, 0)
  end
  t.cleanup, t.cleanup_arg = cleanup, arg
  local how, err = coroutine.yield(SUSPEND)
  if how == CANCEL then error(err, 0) end
end

local function remove_value(list, v)
  for i = #list, 1, -1 do
    if list[i] == v then table.remove(list, i) end
  end
end

--[[
Waits until ready(obj); in a task by joining the waiter list obj[key]
(the notifier calls wake_all on it), made here on first use: most waits
(outside tasks, or on a reply that is already there) never need one.
]]
local function wait_in_task(t, obj, key, ready)
  repeat
    local waiters = obj[key]
    if waiters == nil then
      waiters = {}
      obj[key] = waiters
    end
    waiters[#waiters + 1] = t
    suspend(t, remove_value, waiters)
  until ready(obj)
end

local function wait_on(obj, key, ready, what)
  local t = running_task()
  if t == nil then return drive(ready, obj, what) end
  -- (a tail call: a frame less on the waiting task's stack, which must not grow for a join)
  if not ready(obj) then return wait_in_task(t, obj, key, ready) end
end

--[[
The wait primitive itself, for structures of other modules (a reply
queue): task.wait_until(obj, ready, what), called when ready(obj) was
just found false, returns once ready(obj) is true; whoever makes it true
calls task.notify(obj). Waiting tasks sit in obj.waiters; outside a task
the loop is driven (see drive). `what` names the awaited thing in a
deadlock error.
]]
function M.wait_until(obj, ready, what)
  local t = task_of[coroutine.running()]
  if t == nil then return drive(ready, obj, what, true) end
  return wait_in_task(t, obj, "waiters", ready)
end

function M.notify(obj)
  wake_all(obj.waiters)
end

-- {=================== tasks ===================}

local function new_task(fn)
  local t = setmetatable({status = "new"}, Task)  -- t.joiners: made by the first join
  local function capture(err)
    t.trace = core.traceback(describe(err), 2)  -- the user's frames (SMOLWF_TRACE=1: all)
    return err
  end
  t.co = coroutine.create(function(...) return xpcall(fn, capture, ...) end)
  task_of[t.co] = t
  live[t] = true
  return t
end

function M.spawn(fn, ...)
  if type(fn) ~= "function" then error("task.spawn: expected a function", 2) end
  local t = new_task(fn)
  schedule(t, select("#", ...) > 0 and table.pack(...))
  return t
end

function Task:done()
  return self.status == "done"
end

function Task:join()
  if self == running_task() then error("task:join: a task cannot join itself", 2) end
  self.joined = true
  remove_value(unjoined, self)
  wait_on(self, "joiners", Task.done, "a task to finish")
  if not self.ok then error(self.err, 0) end
  return table.unpack(self.results, 1, self.results.n)
end

function Task:cancel(reason)
  if self.status == "done" then return end
  local err = cancelled_error(reason)
  self.cancelled = true
  if self.status == "new" then
    finish(self, false, err)              -- never started: it never will
  elseif self.status == "suspended" then
    local cleanup, arg = self.cleanup, self.cleanup_arg
    self.cleanup, self.cleanup_arg = nil, nil
    self.status = "ready"
    cleanup(arg, self)
    schedule(self, {CANCEL, err, n = 2})
  else
    self.cancel_err = err                 -- running or about to resume: raised at its next wait
  end
end

function Task:__tostring()
  return ("smol.task (%s)"):format(self.status)
end

function M.current()
  return running_task()
end

function M.in_task()
  return running_task() ~= nil
end

function M.sleep(seconds)
  if type(seconds) ~= "number" or seconds < 0 then
    error("task.sleep: expected a non-negative number of seconds", 2)
  end
  local t = running_task()
  if t == nil then
    local state = {fired = false}
    local timer = core.timer(seconds, function() state.fired = true end)
    local ok, err = pcall(drive, function(s) return s.fired end, state, "task.sleep")
    if not ok then timer:stop(); error(err, 0) end
    return
  end
  local timer = core.timer(seconds, function() wake(t) end)
  suspend(t, timer.stop, timer)
end

--[[
task.all{fn1, fn2, ...} -> {r1, r2, ...}: runs them concurrently; the
results (first return value of each) in order. The first error cancels the
others, waits for them to unwind, and is raised. If the caller itself is
cancelled or interrupted meanwhile, the children are cancelled too.
]]
function M.all(fns)
  if type(fns) ~= "table" then error("task.all: expected a table of functions", 2) end
  local children, remaining, first_err = {}, #fns, nil
  local all_done = M.event()
  if remaining == 0 then return {} end
  local function on_child_done(child)
    remaining = remaining - 1
    if not child.ok and first_err == nil then
      first_err = child.err
      for _, other in ipairs(children) do other:cancel("task.all: a sibling failed") end
    end
    if remaining == 0 then all_done:set() end
  end
  for i, fn in ipairs(fns) do
    children[i] = M.spawn(fn)
    children[i].joined, children[i].on_done = true, on_child_done
  end
  local ok, err = pcall(all_done.wait, all_done)
  if not ok then
    for _, child in ipairs(children) do child:cancel("task.all: caller gave up") end
    error(err, 0)
  end
  if first_err ~= nil then error(first_err, 0) end
  local results = {}
  for i, child in ipairs(children) do results[i] = child.results[1] end
  return results
end

-- {=================== events and queues ===================}

local Event = {}
Event.__index = Event
Event.__name = "smol.task.event"

-- One-shot: set(...) wakes every waiter; wait() returns the values.
function M.event()
  return setmetatable({values = nil}, Event)  -- .waiters: made by the first wait
end

function Event:set(...)
  if self.values then return false end
  self.values = table.pack(...)
  wake_all(self.waiters)
  return true
end

function Event:is_set()
  return self.values ~= nil
end

function Event:wait()
  wait_on(self, "waiters", Event.is_set, "an event")
  return table.unpack(self.values, 1, self.values.n)
end

local Queue = {}
Queue.__index = Queue
Queue.__name = "smol.task.queue"

--[[
push(v); pop() blocks until an item; close(err): pop raises err once empty
(returns nil without err). One table per queue (a request's reply queue
is made per request): the items sit at its integer keys head..tail, and
.waiters is made by the first wait.
]]
function M.queue()
  return setmetatable({head = 1, tail = 0, closed = false}, Queue)
end

function Queue:push(v)
  if self.closed then error("queue:push: the queue is closed", 2) end
  self.tail = self.tail + 1
  self[self.tail] = v
  wake_all(self.waiters)
end

function Queue:size()
  return self.tail - self.head + 1
end

local function queue_poppable(q)
  return q.head <= q.tail or q.closed
end

function Queue:pop()
  wait_on(self, "waiters", queue_poppable, "a queue item")
  if self.head > self.tail then
    if self.close_err ~= nil then error(self.close_err, 0) end
    return nil
  end
  local v = self[self.head]
  self[self.head] = nil
  self.head = self.head + 1
  return v
end

function Queue:close(err)
  if self.closed then return end
  self.closed, self.close_err = true, err
  wake_all(self.waiters)
end

-- {=================== the end of a run ===================}

-- Runs fn() when the run ends (normally, on error or on Ctrl-C), latest first.
function M.at_exit(fn)
  if type(fn) ~= "function" then error("task.at_exit: expected a function", 2) end
  exit_hooks[#exit_hooks + 1] = fn
end

local function report_unjoined()
  for i = 1, #unjoined do
    local t = unjoined[i]
    unjoined[i] = nil
    -- an interrupted task is not an error of its own: the run reports the interrupt once
    if not is_code(t.err, "interrupted") then
      core.report_error("error in task", t.trace or describe(t.err))
    end
  end
end

local function count_live()
  local n = 0
  for _ in pairs(live) do n = n + 1 end
  return n
end

-- Called by the host after a clean main chunk: every task gets to finish.
function M._host_drain()
  while next(live) ~= nil do
    if has_ready() then
      run_ready()
      if has_ready() then core.run_nowait() end   -- see drive
    elseif not core.run_once() and not has_ready() then
      io.stderr:write(("smolwf: warning: %d task(s) still blocked at exit, waiting for nothing that can happen\n")
        :format(count_live()))
      break
    end
  end
  report_unjoined()
end

local function hook_error(err)
  if is_code(err, "interrupted") then return err end
  return core.traceback(describe(err), 2)
end

-- Called by the host on every exit path, with the loop still usable.
function M._host_exit_hooks()
  report_unjoined()
  for i = #exit_hooks, 1, -1 do
    local hook = exit_hooks[i]
    exit_hooks[i] = nil
    local ok, err = xpcall(hook, hook_error)
    if not ok then core.report_error("error in exit hook", err) end
  end
  report_unjoined()
end

registry[REGISTRY_KEY] = M
return M
