-- smol.task: the scheduler over smol.core. Every primitive is checked both
-- outside any task (it drives the loop) and inside one (it yields).
local core = require "smol.core"
local task = require "smol.task"
local h = dofile("spec/fixtures/helpers.lua")

local modes = {
  sync = function(fn) return fn() end,
  task = function(fn) return task.spawn(fn):join() end,
}

-- Runs `smolwf -e CODE`; returns exit code, stdout, stderr.
local function smolwf_e(code)
  local out, err, done = {}, {}, task.event()
  local p = assert(core.spawn{file = core.exe_path(), args = {"smolwf", "-e", code},
    stdout = "chunks", stderr = "chunks",
    on_stdout = function(d) out[#out + 1] = d end,
    on_stderr = function(d) err[#err + 1] = d end,
    on_exit = function(c) done:set(c) end})
  local watchdog = core.timer(20, function() p:kill("KILL") end)  -- a hang fails, not hangs
  local status = done:wait()
  watchdog:stop()
  p:close()
  return status, table.concat(out), table.concat(err)
end

describe("smol.task", function()
  -- other specs in the same run may leave handles open (a shared provider)
  local baseline
  before_each(function() baseline = core.open_handles() end)
  after_each(function()
    assert.is_true(h.handles_back_to(baseline), "uv handles left open: " .. core.open_handles() .. " > " .. baseline)
  end)

  for mode, within in pairs(modes) do
    describe("(" .. mode .. ")", function()
      it("joins a task's results, nils included", function()
        within(function()
          local t = task.spawn(function(a, b) task.sleep(0.01) return a, nil, b end, 1, 2)
          assert.is_false(t:done())
          assert.same({1, nil, 2, n = 3}, table.pack(t:join()))
          assert.is_true(t:done())
          assert.same({1, nil, 2, n = 3}, table.pack(t:join()))  -- again: same results
        end)
      end)

      it("re-raises a task's error value as it is", function()
        within(function()
          local e = {code = "x"}
          local t = task.spawn(function() error(e) end)
          local ok, err = pcall(t.join, t)
          assert.is_false(ok)
          assert.equal(e, err)
        end)
      end)

      it("sleeps concurrently", function()
        within(function()
          -- by order, not by time (a loaded machine stretches any time):
          -- one after the other, a would wake before b fell asleep
          local log = {}
          local function sleeper(name)
            return function()
              log[#log + 1] = name .. " sleeps"
              task.sleep(0.2)
              log[#log + 1] = name .. " wakes"
              return name
            end
          end
          local t0 = core.now()
          local a, b = task.spawn(sleeper("a")), task.spawn(sleeper("b"))
          assert.same({"a", "b"}, {a:join(), b:join()})
          assert.same({"a sleeps", "b sleeps", "a wakes", "b wakes"}, log)
          assert.is_true(core.now() - t0 >= 0.19)
        end)
      end)

      it("runs task.all concurrently, results in order", function()
        within(function()
          local finished = {}
          local r = task.all{
            function() task.sleep(0.15) finished[#finished + 1] = 1 return 1 end,
            function() task.sleep(0.05) finished[#finished + 1] = 2 return 2, "dropped" end,
            function() finished[#finished + 1] = 3 return 3 end}
          assert.same({1, 2, 3}, r)
          assert.same({3, 2, 1}, finished)   -- one after the other would finish 1, 2, 3
          assert.same({}, task.all{})
        end)
      end)

      it("makes task.all's first error cancel the rest", function()
        within(function()
          local finished_late, cleaned = false, false
          local ok, err = pcall(task.all, {
            function() task.sleep(0.01) error("first", 0) end,
            function()
              local ok2, e = pcall(task.sleep, 5)
              cleaned = not ok2 and e.code == "cancelled"
              if ok2 then finished_late = true end
              error(e, 0)
            end})
          assert.is_false(ok)
          assert.equal("first", err)
          assert.is_true(cleaned)
          assert.is_false(finished_late)
        end)
      end)

      it("cancels a blocked task with a cancelled error", function()
        within(function()
          local t = task.spawn(function() task.sleep(5) end)
          task.sleep(0.01)
          t:cancel("enough")
          local ok, err = pcall(t.join, t)
          assert.is_false(ok)
          assert.same({"cancelled", "enough"}, {err.code, err.message})
          assert.equal("cancelled: enough", tostring(err))
          t:cancel()  -- a no-op once done
        end)
      end)

      it("cancels a task that has not started yet", function()
        within(function()
          local ran = false
          local t = task.spawn(function() ran = true end)
          t:cancel()
          assert.has_error(function() t:join() end)
          assert.is_false(ran)
        end)
      end)

      it("wakes every waiter of an event with its values", function()
        within(function()
          local ev = task.event()
          local a = task.spawn(function() return ev:wait() end)
          local b = task.spawn(function() return select(2, ev:wait()) end)
          task.spawn(function() task.sleep(0.01) assert.is_true(ev:set("x", "y")) end)
          assert.same({"x", "y"}, {a:join(), b:join()})
          assert.is_false(ev:set("z"))
          assert.is_true(ev:is_set())
          assert.same({"x", "y"}, {ev:wait()})
        end)
      end)

      it("passes queue items in order and ends with close", function()
        within(function()
          local q = task.queue()
          local consumer = task.spawn(function()
            local got = {}
            for v in function() return q:pop() end do got[#got + 1] = v end
            return got
          end)
          for i = 1, 5 do q:push(i) end
          task.sleep(0.01)
          q:push(6)
          q:close()
          assert.same({1, 2, 3, 4, 5, 6}, consumer:join())
          assert.has_error(function() q:push(7) end, "queue:push: the queue is closed")
        end)
      end)

      it("makes pop raise the error a queue was closed with", function()
        within(function()
          local q = task.queue()
          local t = task.spawn(function() return q:pop() end)
          task.spawn(function() q:close({code = "provider_exited"}) end)
          local ok, err = pcall(t.join, t)
          assert.is_false(ok)
          assert.equal("provider_exited", err.code)
        end)
      end)

      it("knows whether it runs in one of our tasks", function()
        within(function()
          local foreign = coroutine.wrap(function() return task.in_task(), task.current() end)
          assert.same({false, nil}, {foreign()})
          local t
          t = task.spawn(function() return task.in_task(), task.current() == t end)
          assert.same({true, true}, {t:join()})
        end)
      end)

      it("runs a task that yields plainly again on the next turn", function()
        within(function()
          local t = task.spawn(function()
            coroutine.yield("ignored")
            return "resumed"
          end)
          assert.equal("resumed", t:join())
        end)
      end)
    end)
  end

  it("is not in a task at top level, nor in busted's own code", function()
    assert.is_false(task.in_task())
    assert.is_nil(task.current())
  end)

  it("raises a deadlock instead of hanging when nothing can wake a wait", function()
    -- in a fresh host: this one's loop may hold other specs' providers, which would wake it
    local status, _, err = smolwf_e([[
      local ev = require("smol.task").event()
      ev:wait()]])
    assert.equal(1, status)
    assert.matches("deadlock: waiting for an event, but nothing is left that could wake it", err)
  end)

  it("stays one scheduler when package.loaded forgets it (as busted does between files)", function()
    package.loaded["smol.task"] = nil
    assert.equal(task, require "smol.task")
  end)

  it("refuses a task joining itself", function()
    local t
    t = task.spawn(function() return pcall(t.join, t) end)
    local ok, err = t:join()
    assert.is_false(ok)
    assert.matches("cannot join itself", err)
  end)

  it("raises misuse", function()
    assert.has_error(function() task.spawn(42) end, "task.spawn: expected a function")
    assert.has_error(function() task.sleep(-1) end)
    assert.has_error(function() task.at_exit("x") end)
  end)

  describe("at the end of a run", function()
    it("waits for every task, then runs exit hooks latest first", function()
      local status, out = smolwf_e([[
        local task = require "smol.task"
        task.at_exit(function() print("hook 1") end)
        task.at_exit(function() task.sleep(0.01) print("hook 2") end)
        task.spawn(function() task.sleep(0.05) print("task done") end)
        print("main done")]])
      assert.equal(0, status)
      assert.equal("main done\ntask done\nhook 2\nhook 1\n", out)
    end)

    it("reports an error in a task nobody joined and exits non-zero", function()
      local status, out, err = smolwf_e([[
        local task = require "smol.task"
        task.spawn(function() error("lost error") end)
        task.spawn(function() error("joined error") end):join()]])
      assert.equal(1, status)
      assert.matches("smolwf: error in task: %(command line%):2: lost error", err)
      assert.matches("joined error", err)  -- the main chunk's own error
      assert.equal("", out)
    end)

    it("runs exit hooks after an error too, and reports a failing hook", function()
      local status, out, err = smolwf_e([[
        local task = require "smol.task"
        task.at_exit(function() print("hook ran") end)
        task.at_exit(function() error("bad hook") end)
        error("main failed")]])
      assert.equal(1, status)
      assert.equal("hook ran\n", out)
      assert.matches("main failed", err)
      assert.matches("smolwf: error in exit hook: %(command line%):3: bad hook", err)
    end)

    it("does not report a cancelled task nobody joined", function()
      local status, _, err = smolwf_e([[
        local task = require "smol.task"
        task.spawn(function() task.sleep(5) end):cancel()
        local t = task.spawn(function() task.sleep(5) end)
        task.spawn(function() t:cancel("stop") end)]])
      assert.equal(0, status)
      assert.equal("", err)
    end)

    it("warns about tasks blocked forever instead of hanging", function()
      local status, _, err = smolwf_e([[
        local task = require "smol.task"
        local q = task.queue()
        task.spawn(function() q:pop() end)]])
      assert.equal(0, status)
      assert.matches("1 task%(s%) still blocked at exit", err)
    end)
  end)
end)
