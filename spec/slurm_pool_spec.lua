-- sandbox.pool{slurm = ...} against the test cluster (.ci/slurm-up): one
-- provider per allocated node, sessions spread over them, the allocation
-- released at every end of a run, lost providers (killed, node down).
local core = require "smol.core"
local task = require "smol.task"
local sandbox = require "smol.sandbox"
local slurm = require "smol.slurm"
local sh = dofile("spec/fixtures/slurm_helpers.lua")
local h = sh.h

local RUN = "spec/fixtures/slurm_pool_run.lua"
local BWRAP = {profile = "bwrap/default", workspace = ""}

local calls_since, providers_of, nodes_idle, report_of = sh.calls_since, sh.providers_of, sh.nodes_idle, sh.report_of

-- The nodes the job's steps run on, sorted (the sruns start at once: any step ids).
local function step_nodes(job_id)
  local nodes = {}
  for _, node in pairs(sh.steps(job_id)) do nodes[#nodes + 1] = node end
  table.sort(nodes)
  return nodes
end

local function nothing_left(job_id)
  local empty, listed = sh.queue_empties()
  assert(empty, "still in squeue: " .. tostring(listed))
  local gone, left = sh.job_processes_gone(job_id)
  assert(gone, "processes of job " .. job_id .. " left: " .. tostring(left))
end

describe("sandbox.pool on Slurm", function()
  local pool
  before_each(sh.assert_queue_empty)
  after_each(function()
    if pool then pool:close() end
    pool = nil
    sandbox.shutdown()
    h.cleanup()
    sh.assert_queue_empty()
  end)

  it("makes an allocation, places one provider on each node, and releases it at close", function()
    local before = slurm.calls()
    pool = sandbox.pool{slurm = {nodes = 3}}
    local job_id = pool.allocation.job_id
    assert.is_true(pool.allocation.made)
    local nodes, slots = {}, {}
    for i, p in ipairs(pool:providers()) do nodes[i], slots[i] = p.node, p.slots end
    assert.same({"n1", "n2", "n3"}, nodes)
    assert.same({2, 2, 2}, slots)
    assert.same({"n1", "n2", "n3"}, step_nodes(job_id))
    local pids = providers_of(job_id)
    assert.is_not_nil(pids.n1 and pids.n2 and pids.n3)
    assert.same({salloc = 1, scontrol = 2, srun = 3}, calls_since(before))
    -- sessions opened at once spread over the nodes; commands cost the controller nothing
    local sbs, placed = {}, {}
    for i = 1, 6 do
      sbs[i] = pool:open(BWRAP)
      placed[i] = pool:placement(sbs[i]).node
    end
    assert.same({"n1", "n2", "n3", "n1", "n2", "n3"}, placed)
    before = slurm.calls()
    task.all{
      function() for _ = 1, 20 do assert.equal(0, sbs[1]:exec{"true"}.exit_code) end end,
      function() for _ = 1, 20 do assert.equal(0, sbs[2]:exec{"true"}.exit_code) end end,
      function() for _ = 1, 20 do assert.equal(0, sbs[3]:exec{"true"}.exit_code) end end,
    }
    assert.same({}, calls_since(before))
    pool:close()
    assert.equal("", sh.queue())   -- close released it and waited for squeue to drop it
    nothing_left(job_id)
  end)

  it("gives each provider the slots cpus_per_node asks for", function()
    pool = sandbox.pool{slurm = {nodes = 2, cpus_per_node = 1}}
    local p = pool:providers()
    assert.same({1, 1}, {p[1].slots, p[2].slots})
    assert.same({"n1", "n2"}, {p[1].node, p[2].node})
  end)

  it("uses the allocation it runs in (salloc CMD), and leaves it to salloc", function()
    local r = sh.run_lines({"salloc", "-N2", core.exe_path(), RUN, "end"}, {timeout = 60})
    assert.equal(0, r.code, r.err)
    local report = report_of(r)
    assert.is_false(report.made)
    assert.same({"n1", "n2"}, report.nodes)
    assert.same({"n1", "n2"}, report.placed)
    assert.same({1, 1}, report.slots)   -- salloc -N2 gave one CPU per node
    assert.same({salloc = 0, scontrol = 1, scancel = 0, squeue = 0, srun = 2}, report.calls)
    nothing_left(report.job_id)
  end)

  for _, case in ipairs{{"SIGTERM", "TERM", 143}, {"Ctrl-C (SIGINT)", "INT", 130}} do
    it("releases the allocation it made on " .. case[1] .. " mid-run, leaving no provider", function()
      local r = sh.run_lines({core.exe_path(), RUN, "hold", "3"}, {on_line = function(line, p)
        if line:sub(1, 1) == "{" then p:kill(case[2]) end
      end})
      assert.equal(case[3], r.code, r.err)
      local report = report_of(r)
      assert.is_true(report.made)
      assert.same({"n1", "n2", "n3"}, report.placed)
      assert.equal("", sh.queue())   -- gone the moment the run exited
      nothing_left(report.job_id)
    end)
  end

  it("loses a provider killed mid-run and keeps placing on the others", function()
    pool = sandbox.pool{slurm = {nodes = 3}}
    local heard = {}
    pool:watch(function(what, m) if what == "lost" then heard[#heard + 1] = m.node end end)
    local sb2 = pool:open_on(pool:member(2), BWRAP)
    local running = task.spawn(function() return pcall(sb2.exec, sb2, {"sleep", "300"}) end)
    local pid = providers_of(pool.allocation.job_id).n2
    assert(core.kill(tonumber(pid), "KILL"))
    local ok, err = running:join()
    assert.is_false(ok)
    assert.equal("provider_exited", err.code)
    for _ = 1, 4 do assert.are_not.equal("n2", pool:placement(pool:open(BWRAP)).node) end
    local lost = pool:providers()[2]
    assert.is_false(lost.alive)
    assert.matches("^provider 2 %(n2%) exited with status %d+; its last stderr lines: .*n2", lost.lost)
    assert.same({"n2"}, heard)
    assert.same({"n1", "n3"}, step_nodes(pool.allocation.job_id))
  end)

  it("loses the provider of a node set down, while the job keeps its other nodes", function()
    pool = sandbox.pool{slurm = {nodes = 3}}
    local sbs = {}
    for i = 1, 3 do sbs[i] = pool:open_on(pool:member(i), BWRAP) end
    local t = task.spawn(function() return pcall(sbs[2].exec, sbs[2], {"sleep", "300"}) end)
    local _, code, err = sh.run{"scontrol", "update", "nodename=n2", "state=down", "reason=spec"}
    assert.equal(0, code, err)
    local ok, e = t:join()
    assert.is_false(ok)
    assert.equal("provider_exited", e.code)
    pool:refresh()
    assert.matches("^provider 2 %(n2%) exited .*Node failure on n2", pool:providers()[2].lost)
    for _, i in ipairs{1, 3} do assert.equal("ok\n", sbs[i]:exec{"echo", "ok"}.stdout) end
    assert.matches("^" .. pool.allocation.job_id .. " RUNNING ", sh.queue())
    pool:close()
    sh.run{"scontrol", "update", "nodename=n2", "state=resume"}   -- may already be back (ReturnToService)
    assert.is_true(nodes_idle())
  end)

  it("names a salloc that fails, with nothing queued", function()
    local e = h.catch(sandbox.pool, {slurm = {nodes = 1, partition = "bogus"}})
    assert.equal("slurm", e.code)
    assert.matches("invalid partition specified: bogus", tostring(e))
    assert.equal("", sh.queue())
  end)

  it("names a node whose provider cannot start, and releases the allocation", function()
    local e = h.catch(sandbox.pool, {slurm = {nodes = 2, program = "/nonexistent/smolwf-provider"}})
    assert.equal("provider_exited", e.code)
    assert.matches("^provider %d %(n%d%) did not start serving: .*its stderr ends: .*"
      .. "/nonexistent/smolwf%-provider", e.message)
    local empty, listed = sh.queue_empties()
    assert(empty, "still in squeue: " .. tostring(listed))
  end)
end)

describe("bench/pool_bench.lua", function()
  it("prints every figure it promises against the test cluster", function()
    local r = sh.run_lines({core.exe_path(), "bench/pool_bench.lua", "6", "1", "local/default", "1048576"},
      {timeout = 120})
    assert.equal(0, r.code, r.err)
    local out = table.concat(r.out, "\n")
    for _, label in ipairs{"per step, one local provider", "per step, pool of 3 local providers (the engine's share)",
        "per step, pool of 3 Slurm-placed providers", "ratio Slurm pool / one local (goal <= 1.2)",
        "sandbox.pool{slurm = {nodes = 3}} serving", "srun -N1 hostname"} do
      assert.matches(label:gsub("%p", "%%%0") .. "%s+%d+%.%d+", out)
    end
    assert.matches("Slurm commands while the steps ran: none", out, 1, true)
    assert.matches("3. moving a 1 MiB output", out, 1, true)
    sh.assert_queue_empty()
  end)
end)
