-- sandbox.pool with launcher programs on this machine (several bundled
-- providers): placement, slots, lost providers, start failures, closing.
local core = require "smol.core"
local task = require "smol.task"
local sandbox = require "smol.sandbox"
local h = dofile("spec/fixtures/helpers.lua")

local PROVIDER = core.bundled_provider()
local EMPTY = {profile = "local/default", workspace = ""}

local function pids_of(pool)
  local pids = {}
  for i, p in ipairs(pool:providers()) do pids[i] = p.pid end
  return pids
end

local function all_gone(pids)
  return h.wait_until(function()
    for _, pid in ipairs(pids) do
      if h.alive(pid) then return false end
    end
    return true
  end)
end

local function host_says(argv)
  local r = sandbox.host{}:exec(argv)
  assert(r.exit_code == 0, r.stderr)
  return (r.stdout:gsub("\n$", ""))
end

describe("sandbox.pool", function()
  local pool
  after_each(function()
    if pool then pool:close() end
    pool = nil
    sandbox.shutdown()
    h.cleanup()
  end)

  describe("with programs", function()
    it("starts one provider process per program, identical programs too", function()
      pool = sandbox.pool{programs = {PROVIDER, {PROVIDER}, PROVIDER}}
      local pids = pids_of(pool)
      assert.equal(3, #pids)
      assert.are_not.equal(pids[1], pids[2])
      assert.are_not.equal(pids[2], pids[3])
      for i = 1, 3 do
        local sb = pool:open_on(pool:member(i), EMPTY)
        assert.equal(pids[i], sb:connection().pid)
        assert.equal("hi\n", sb:exec{"echo", "hi"}.stdout)
      end
    end)

    it("gives a launcher its node's CPU count as slots, and its host name as node", function()
      pool = sandbox.pool{programs = {PROVIDER, {PROVIDER, slots = 7, node = "box"}}}
      local p = pool:providers()
      assert.equal(tonumber(host_says{"getconf", "_NPROCESSORS_ONLN"}), p[1].slots)
      assert.equal(host_says{"uname", "-n"}, p[1].node)
      assert.same({7, "box"}, {p[2].slots, p[2].node})
      assert.equal("smolwf-provider", p[1].label)
    end)

    it("places each session on the least-loaded provider, lowest index first", function()
      pool = sandbox.pool{programs = {PROVIDER, PROVIDER, PROVIDER}, slots = 1}
      local sbs, where = {}, {}
      for i = 1, 4 do
        sbs[i] = pool:open(EMPTY)
        where[i] = pool:placement(sbs[i]).provider
      end
      assert.same({1, 2, 3, 1}, where)            -- every slot taken: the least loaded still
      assert.same({2, 1, 1}, {pool:providers()[1].busy, pool:providers()[2].busy, pool:providers()[3].busy})
      sbs[2]:close()                               -- gives its slot back
      assert.equal(2, pool:placement(pool:open(EMPTY)).provider)
      assert.same({provider = 1, node = pool:providers()[1].node}, pool:placement(sbs[1]))
    end)

    it("lets an acquire wait for a free slot, which a release gives", function()
      pool = sandbox.pool{programs = {PROVIDER, PROVIDER}, slots = 1}
      local a, b = pool:acquire(), pool:acquire()
      assert.same({1, 2}, {a.index, b.index})
      local waiter = task.spawn(function() return pool:acquire() end)
      task.sleep(0.05)
      assert.is_false(waiter:done())
      pool:release(b)
      assert.equal(2, waiter:join().index)
      pool:release(a)
      pool:release(b)
      assert.has_error(function() pool:release(b) end, "pool: release: the provider has no slot acquired")
    end)

    it("a session on a provider holds no slot when opened with open_on", function()
      pool = sandbox.pool{programs = {PROVIDER, PROVIDER}, slots = 1}
      pool:open_on(pool:member(1), EMPTY)
      assert.equal(1, pool:acquire().index)
    end)
  end)

  describe("a provider that dies", function()
    it("is lost: watchers hear it once, and nothing is placed on it again", function()
      pool = sandbox.pool{programs = {PROVIDER, PROVIDER, PROVIDER}, slots = 1}
      local heard = {}
      pool:watch(function(what, m) if what == "lost" then heard[#heard + 1] = m.index end end)
      local sb = pool:open_on(pool:member(2), EMPTY)
      local sleeper = task.spawn(function() return pcall(sb.exec, sb, {"sleep", "30"}) end)
      task.sleep(0.05)
      sb:connection():kill("KILL")
      local ok, err = sleeper:join()
      assert.is_false(ok)
      assert.equal("provider_exited", err.code)
      for _ = 1, 3 do assert.are_not.equal(2, pool:placement(pool:open(EMPTY)).provider) end
      local p = pool:providers()[2]
      assert.is_false(p.alive)
      assert.equal(("provider 2 (%s) was killed by signal KILL"):format(p.node), p.lost)
      assert.same({2}, heard)
      local e = h.catch(pool.open_on, pool, pool:member(2), EMPTY)
      assert.equal("provider_exited", e.code)
      assert.equal(p.lost, e.message)
    end)

    it("when it is the last, makes placement fail naming every provider lost", function()
      pool = sandbox.pool{programs = {PROVIDER, {PROVIDER, node = "second"}}, slots = 1}
      local first = pool:providers()[1].node
      pool:member(1).conn:kill("KILL")
      pool:member(2).conn:kill("TERM")
      assert.is_true(h.wait_until(function() return pool:member(2).conn.exit_code ~= nil end))
      assert.is_true(h.wait_until(function() return pool:member(1).conn.exit_code ~= nil end))
      for _, place in ipairs{pool.open, pool.acquire} do
        local e = h.catch(place, pool, EMPTY)
        assert.equal("pool_lost", e.code)
        assert.same({first, "second"}, e.nodes)
        assert.matches("every provider of the pool is lost: provider 1 %(" .. first:gsub("%p", "%%%0")
          .. "%) was killed by signal KILL; provider 2 %(second%) ", e.message)
      end
    end)

    it("wakes an acquire that waits when the last provider dies", function()
      pool = sandbox.pool{programs = {PROVIDER}, slots = 1}
      pool:acquire()
      local waiter = task.spawn(function() return pcall(pool.acquire, pool) end)
      task.sleep(0.05)
      pool:member(1).conn:kill("KILL")
      local ok, e = waiter:join()
      assert.is_false(ok)
      assert.equal("pool_lost", e.code)
    end)
  end)

  describe("a start that fails", function()
    it("names the provider that did not serve, with its stderr, and stops the others", function()
      local before = #sandbox.connections()
      local e = h.catch(sandbox.pool, {programs = {PROVIDER, {"sh", "-c", "echo no such node >&2; exit 3"}}})
      assert.equal("provider_exited", e.code)
      assert.matches("^provider 2 %(sh %-c echo no such node >&2; exit 3%) did not start serving: .*"
        .. "exited with status 3; its stderr ends: no such node$", e.message)
      assert.equal(before, #sandbox.connections())
    end)

    it("gives up on one that never answers after start_timeout", function()
      local t0 = core.now()
      local e = h.catch(sandbox.pool, {programs = {{"sh", "-c", "exec sleep 300"}}, start_timeout = 0.3})
      assert.equal("timeout", e.code)
      assert.matches("^provider 1 %(sh %-c exec sleep 300%) did not start serving: .*did not answer "
        .. "`describe` within 0.3 s", e.message)
      assert.is_true(core.now() - t0 < h.WAIT)
    end)

    it("names a program that cannot be run", function()
      local e = h.catch(sandbox.pool, {programs = {PROVIDER, "/nonexistent/provider"}})
      assert.equal("not_found", e.code)
      assert.matches("cannot run provider `/nonexistent/provider`", e.message, 1, true)
    end)
  end)

  describe("misuse", function()
    it("raises at the caller's line, naming the option", function()
      for _, case in ipairs{
        {nil, "expected a table of options"},
        {{}, "give exactly one of programs and slurm"},
        {{programs = {PROVIDER}, slurm = {}}, "give exactly one of programs and slurm"},
        {{programs = {}}, "option programs must be a non%-empty list of programs"},
        {{programs = {{PROVIDER, 3}}}, "programs%[1%]%[2%] must be a string"},
        {{programs = {{PROVIDER, slot = 2}}}, 'programs%[1%] has an unknown field "slot" %(known: slots, node%)'},
        {{programs = {PROVIDER}, slots = 0}, "option slots must be a positive integer"},
        {{programs = {PROVIDER}, start_timeout = -1}, "option start_timeout must be a positive number"},
        {{programs = {PROVIDER}, jobs = 2}, 'unknown option "jobs"'},
        {{slurm = {node = 2}}, 'option slurm has an unknown field "node"'},
      } do
        local e = h.catch(function() local p = sandbox.pool(case[1]); return p end)
        assert.matches("pool_spec%.lua:%d+: sandbox%.pool: " .. case[2], e)
      end
    end)

    it("of a pool's methods raises at the caller's line too", function()
      pool = sandbox.pool{programs = {PROVIDER}}
      -- (each call in a closure of this file, not a tail call: the line is the closure's)
      local function open(p, opts) local sb = p.open(p, opts); return sb end
      assert.matches("pool_spec%.lua:%d+: pool: open: the pool chooses the provider",
        h.catch(open, pool, {program = PROVIDER}))
      assert.matches("pool_spec%.lua:%d+: sandbox%.open: option cwd must be a string",
        h.catch(open, pool, {cwd = 5}))
      assert.matches("pool_spec%.lua:%d+: pool: open: expected a pool %(did you use '%.'",
        h.catch(function() local sb = pool.open(EMPTY); return sb end))
      assert.matches("pool_spec%.lua:%d+: pool: open_on: expected a provider of this pool",
        h.catch(function() local sb = pool:open_on({index = 1}, EMPTY); return sb end))
      pool:close()
      assert.matches("pool_spec%.lua:%d+: pool: open: attempt to use a closed pool",
        h.catch(open, pool, EMPTY))
    end)
  end)

  describe("closing", function()
    it("closes every session and ends every provider; again does nothing", function()
      pool = sandbox.pool{programs = {PROVIDER, PROVIDER}}
      local pids = pids_of(pool)
      local a, b = pool:open(EMPTY), pool:open_on(pool:member(1), EMPTY)
      local p = a:spawn{"sleep", "30"}
      pool:close()
      assert.is_true(a:is_closed())
      assert.is_true(b:is_closed())
      assert.is_true(all_gone(pids))
      pool:close()
      assert.is_not_nil(p)
    end)

    for _, case in ipairs{
      {"a script that ends without closing it", "", 0},
      {"a script that fails", "error('on purpose')", 1},
      {"SIGTERM", "core.kill(core.getpid(), 'TERM') task.sleep(30)", 143},
    } do
      it("leaves no provider running after " .. case[1], function()
        local code = ([[
          local core, task, sandbox = require "smol.core", require "smol.task", require "smol.sandbox"
          local pool = sandbox.pool{programs = {core.bundled_provider(), core.bundled_provider()}}
          local sb = pool:open{profile = "local/default", workspace = ""}
          local p = sb:spawn{"sleep", "30"}
          for _, m in ipairs(pool:providers()) do io.write("pid ", m.pid, "\n") end
          io.flush()
          %s]]):format(case[2])
        local out, status = h.run_host(code)
        assert.equal(case[3], status, out)
        local pids = {}
        for pid in out:gmatch("pid (%d+)") do pids[#pids + 1] = pid end
        assert.equal(2, #pids, out)
        assert.is_true(all_gone(pids))
      end)
    end
  end)
end)
