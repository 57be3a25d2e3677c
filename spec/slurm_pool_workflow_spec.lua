-- Workflows on a pool placed by Slurm, against the test cluster
-- (.ci/slurm-up): steps spread over n1..n3 with a build's outputs
-- following them, both allocation modes, Ctrl-C and SIGTERM mid-run, and
-- a provider killed and a node set down mid-run.
local cjson = require "cjson"
local core = require "smol.core"
local task = require "smol.task"
local wf = require "smol.workflow"
local testing = require "smol.testing"
local sandbox = require "smol.sandbox"
local fs = require "smol.fs"
local sh = dofile("spec/fixtures/slurm_helpers.lua")
local h = sh.h

local function run(def, opts)
  opts = opts or {}
  opts.cache, opts.report_dir = false, h.tempdir()
  return testing.run_workflow(wf.define(def), opts)
end

-- The serving provider process on `node` of job_id.
local function provider_on(job_id, node)
  return sh.providers_of(job_id)[node]
end

local function job_of_queue()
  return sh.queue():match("^(%d+) RUNNING")
end

local nodes_idle = sh.nodes_idle

-- A workflow file: build (its outputs declared), a test matrix over six
-- shards, each running the built program; `hold` keeps every step running.
local function workflow_file(dir, hold)
  local path = dir .. "/wf.lua"
  fs.write_file(path, ([[
local wf = require "smol.workflow"
return wf.define{
  name = "cluster",
  sandbox = {profile = "bwrap/default", workspace = "", pool = {slurm = {nodes = 3}}},
  steps = {
    {name = "build", outputs = {"build/app"}, run = function(ctx)
      ctx:sh("mkdir -p build && printf '#!/bin/sh\necho shard $1\n' > build/app && chmod +x build/app")
    end},
    {name = "test", needs = "build", matrix = {shard = {1, 2, 3, 4, 5, 6}}, run = function(ctx)
      %s
      return ctx:sh("./build/app " .. ctx.matrix.shard).stdout
    end},
  },
}
]]):format(hold and 'ctx:sh("sleep 300")' or ""))
  return path
end

local function last_report(dir)
  local runs = dir .. "/.smolwf/runs"
  local names = h.list(runs)
  table.sort(names)
  return cjson.decode(fs.read_file(runs .. "/" .. names[#names] .. "/report.json"))
end

describe("a workflow on a Slurm pool", function()
  before_each(sh.assert_queue_empty)
  after_each(function()
    sandbox.shutdown()
    h.cleanup()
    sh.assert_queue_empty()
  end)

  it("spreads a matrix over all three nodes, each test getting the build's outputs", function()
    local r = run{
      name = "spread", sandbox = {profile = "bwrap/default", workspace = "", pool = {slurm = {nodes = 3}}},
      steps = {
        {name = "build", outputs = {"build/app"}, run = function(ctx)
          ctx:sh("mkdir -p build && printf '#!/bin/sh\\necho shard $1\\n' > build/app && chmod +x build/app")
        end},
        {name = "test", needs = "build", matrix = {shard = {1, 2, 3, 4, 5, 6}}, run = function(ctx)
          return ctx:sh("./build/app " .. ctx.matrix.shard).stdout
        end},
      },
    }
    assert.equal("success", r.result)
    assert.equal(6, r.jobs)   -- 3 nodes x 2 CPUs
    local build_node = r.by_id.build.placement.node
    local nodes, moved_to = {}, {}
    for shard = 1, 6 do
      local t = r.by_id["test[shard=" .. shard .. "]"]
      assert.equal("shard " .. shard .. "\n", t.value)
      nodes[t.placement.node] = true
      for _, m in ipairs(t.moved_in or {}) do
        assert.equal("build", m.step)
        moved_to[#moved_to + 1] = t.placement.node
      end
    end
    assert.same({n1 = true, n2 = true, n3 = true}, nodes)
    -- once into each other node's shared session, never where build ran
    table.sort(moved_to)
    local others = {}
    for _, n in ipairs{"n1", "n2", "n3"} do if n ~= build_node then others[#others + 1] = n end end
    assert.same(others, moved_to)
    assert.equal("", sh.queue())   -- the allocation made for the run went with it
  end)

  it("makes its own allocation from the CLI and leaves nothing in squeue", function()
    local dir = h.tempdir()
    local r = sh.run_lines({core.exe_path(), "run", "--no-progress", "--no-cache", workflow_file(dir)},
      {cwd = dir, timeout = 120})
    assert.equal(0, r.code, r.err)
    local report = last_report(dir)
    assert.equal("success", report.result)
    assert.equal(3, #report.pool.providers)
    assert.matches("^%d+$", report.pool.allocation)
    assert.equal("", sh.queue())
  end)

  it("replays a recorded run without running any Slurm command", function()
    local dir = h.tempdir()
    local file = workflow_file(dir)
    local function report(name) return cjson.decode(fs.read_file(dir .. "/" .. name .. "/report.json")) end
    local r = sh.run_lines({core.exe_path(), "run", "--no-progress", "--no-cache", "--report-dir", dir .. "/recorded",
      "--record", dir .. "/rec.jsonl", file}, {cwd = dir, timeout = 120})
    assert.equal(0, r.code, r.err)
    local recorded = report("recorded")
    -- Every Slurm command on PATH says it ran, and fails.
    fs.mkdir_p(dir .. "/stubs")
    for _, name in ipairs{"salloc", "sbatch", "srun", "scontrol", "scancel", "squeue", "sinfo"} do
      fs.write_file(dir .. "/stubs/" .. name, ("#!/bin/sh\necho %s >> %s/slurm-calls\nexit 1\n"):format(name, dir))
      assert(os.execute("chmod +x " .. dir .. "/stubs/" .. name))
    end
    local env = {PATH = dir .. "/stubs:" .. os.getenv("PATH"), HOME = os.getenv("HOME") or "/",
      SLURM_CONF = os.getenv("SLURM_CONF")}
    r = sh.run_lines({core.exe_path(), "run", "--no-progress", "--no-cache", "--report-dir", dir .. "/replayed",
      "--replay", dir .. "/rec.jsonl", file}, {cwd = dir, timeout = 120, env = env})
    assert.is_nil(fs.try_read_file(dir .. "/slurm-calls"), "a replay ran Slurm commands")
    assert.equal(0, r.code, r.err)
    local replayed = report("replayed")
    assert.equal("success", replayed.result)
    local function nodes(report)
      local out = {}
      for _, p in ipairs(report.pool.providers) do out[#out + 1] = p.node .. "/" .. math.tointeger(p.slots) end
      return out
    end
    assert.same(nodes(recorded), nodes(replayed))
    assert.equal("", sh.queue())
  end)

  it("uses the allocation salloc gave it (salloc -N3 smolwf run ...)", function()
    local dir = h.tempdir()
    local r = sh.run_lines({"salloc", "-N3", "--no-kill", core.exe_path(), "run", "--no-progress", "--no-cache",
      workflow_file(dir)}, {cwd = dir, timeout = 120})
    assert.equal(0, r.code, r.err)
    local report = last_report(dir)
    assert.equal("success", report.result)
    local nodes = {}
    for _, p in ipairs(report.pool.providers) do nodes[#nodes + 1] = p.node .. "/" .. math.tointeger(p.slots) end
    assert.same({"n1/1", "n2/1", "n3/1"}, nodes)   -- salloc's one CPU per node
    local empty, listed = sh.queue_empties()   -- salloc releases its job itself, as it exits
    assert(empty, "still in squeue: " .. tostring(listed))
  end)

  for _, case in ipairs{{"SIGTERM", "TERM", 143}, {"Ctrl-C (SIGINT)", "INT", 130}} do
    it("leaves squeue empty and no provider after " .. case[1] .. " mid-run", function()
      local dir = h.tempdir()
      local started = 0
      local r = sh.run_lines({core.exe_path(), "run", "--no-cache", workflow_file(dir, true)},
        {cwd = dir, timeout = 120, on_line = function(line, p)
          if line:match("^%[test%[shard=%d%]%] started") then
            started = started + 1
            if started == 6 then p:kill(case[2]) end
          end
        end})
      assert.equal(6, started, table.concat(r.out, "\n"))
      assert.equal(case[3], r.code, r.err .. table.concat(r.out, "\n"))
      assert.equal("", sh.queue())
      local report = last_report(dir)
      assert.equal("cancelled", report.result)
      local job = report.pool.allocation
      local gone, left = sh.job_processes_gone(job)
      assert(gone, "processes of job " .. job .. " left: " .. tostring(left))
    end)
  end

  it("runs the steps of a provider killed mid-run again on the other nodes, and says so", function()
    local killed = false
    local r = run{
      name = "killed", sandbox = {profile = "bwrap/default", workspace = "", pool = {slurm = {nodes = 3}}},
      steps = {
        {name = "work", matrix = {n = {1, 2, 3}}, retry = {attempts = 1}, run = function(ctx)
          local here = job_of_queue()
          if ctx.matrix.n == 2 and not killed then
            killed = true
            task.spawn(function()
              task.sleep(0.2)
              assert(core.kill(provider_on(here, "n2"), "KILL"))
            end)
            ctx:sh("sleep 300")
          end
          return ctx:sh("echo ok").stdout
        end},
      },
    }
    assert.equal("success", r.result)
    local w2 = r.by_id["work[n=2]"]
    assert.equal(1, w2.infra_retries)
    assert.equal("n2", w2.attempts[1].placement.node)
    assert.matches("^provider 2 %(n2%) ", w2.attempts[1].lost)
    assert.are_not.equal("n2", w2.placement.node)
    assert.is_false(r.pool.providers[2].alive)
    assert.equal("", sh.queue())
  end)

  it("runs the steps of a node set down mid-run again elsewhere", function()
    local downed = false
    local ok, r = pcall(run, {
      name = "down", sandbox = {profile = "bwrap/default", workspace = "", pool = {slurm = {nodes = 3}}},
      steps = {
        {name = "work", matrix = {n = {1, 2, 3}}, run = function(ctx)
          ctx:session()
          if ctx.matrix.n == 2 and not downed then
            downed = true
            task.spawn(function()
              task.sleep(0.2)
              sh.run{"scontrol", "update", "nodename=n2", "state=down", "reason=spec"}
            end)
            ctx:sh("sleep 300")
          end
          return ctx:sh("echo ok").stdout
        end},
      },
    })
    sh.run{"scontrol", "update", "nodename=n2", "state=resume"}   -- may be back already (ReturnToService)
    assert.is_true(nodes_idle())
    assert(ok, tostring(r))
    assert.equal("success", r.result)
    local w2 = r.by_id["work[n=2]"]
    assert.equal(1, w2.infra_retries)
    assert.matches("^provider 2 %(n2%) .*Node failure on n2", w2.attempts[1].lost)
    assert.are_not.equal("n2", w2.placement.node)
  end)
end)
