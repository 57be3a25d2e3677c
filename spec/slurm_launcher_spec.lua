-- smol.slurm against the test cluster (.ci/slurm-up): allocations made
-- here or found in the environment, the per-node srun argv, release at
-- every end of a run, and the count of Slurm commands.
local cjson = require "cjson"
local core = require "smol.core"
local sandbox = require "smol.sandbox"
local slurm = require "smol.slurm"
local lists = require "smol.slurm.lists"
local sh = dofile("spec/fixtures/slurm_helpers.lua")
local h = sh.h

local RUN = "spec/fixtures/slurm_run.lua"

local calls_since = sh.calls_since

-- A directory the run fixture writes its wrappers in, usable by nobody too.
local function run_dir()
  local dir = h.tempdir()
  assert(os.execute("chmod 777 " .. dir))
  return dir
end

-- `scontrol show job` of job_id, as {Key = value} (the first of each key).
local function job_fields(job_id)
  local out = sh.run{"scontrol", "show", "job", "--oneliner", job_id}
  local fields = {}
  for k, v in out:gmatch("(%w+)=(%S*)") do
    if fields[k] == nil then fields[k] = v end
  end
  return fields
end

local report_of = sh.report_of

describe("smol.slurm", function()
  before_each(sh.assert_queue_empty)

  after_each(function()
    sandbox.shutdown()
    h.cleanup()
    sh.assert_queue_empty()
  end)

  describe("an allocation made here", function()
    it("takes whole nodes, lists them with their CPUs, and is gone from squeue once released", function()
      local before = slurm.calls()
      local alloc = slurm.allocation{nodes = 3}
      assert.is_true(alloc.made)
      assert.matches("^%d+$", alloc.job_id)
      assert.same({"n1", "n2", "n3"}, alloc.nodes)
      assert.same({n1 = 2, n2 = 2, n3 = 2}, alloc.cpus)
      assert.equal(alloc.job_id .. " RUNNING smolwf\n", sh.queue())
      assert.same({salloc = 1, scontrol = 2}, calls_since(before))
      alloc:release()
      assert.equal("", sh.queue())   -- release waited for squeue to drop it
      alloc:release()                -- idempotent: nothing more is run
      local delta = calls_since(before)
      assert.equal(1, delta.scancel)
      assert.is_true(delta.squeue >= 1)
    end)

    it("passes partition, time, cpus_per_node, job_name and args to salloc", function()
      local alloc = slurm.allocation{nodes = 2, partition = "debug", time = 7, cpus_per_node = 1,
        job_name = "spec-job", args = {"--comment=from-the-spec"}}
      local job = job_fields(alloc.job_id)
      assert.equal("debug", job.Partition)
      assert.equal("00:07:00", job.TimeLimit)
      assert.equal("spec-job", job.JobName)
      assert.equal("from-the-spec", job.Comment)
      assert.equal("2", job.NumCPUs)
      assert.same({n1 = 1, n2 = 1}, alloc.cpus)
      alloc:release()
    end)

    it("gives the srun argv of one step per node, with that node's CPUs, and counts it", function()
      local alloc = slurm.allocation{nodes = 3}
      local before = slurm.calls()
      assert.same({"srun", "--jobid=" .. alloc.job_id, "--nodes=1", "--ntasks=1", "--nodelist=n2",
        "--cpus-per-task=2", "--unbuffered", "--kill-on-bad-exit=1", "--mpi=none", "--quiet",
        "/bin/prog", "arg"}, alloc:srun_argv("n2", {"/bin/prog", "arg"}, {"--quiet"}))
      assert.same({srun = 1}, calls_since(before))
      assert.has_error(function() alloc:srun_argv("n9", "/bin/prog") end,
        "slurm: srun_argv: n9 is not a node of allocation " .. alloc.job_id)
      alloc:release()
    end)

    it("serves a bwrap session through that argv from the node it names", function()
      local alloc = slurm.allocation{nodes = 3}
      local program = sh.wrapper(alloc:srun_argv("n3", sh.PROVIDER))
      local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = h.tempdir()}
      local before = slurm.calls()
      for _ = 1, 20 do assert.equal(0, sb:exec{"true"}.exit_code) end
      assert.same({}, calls_since(before))   -- commands in a session cost the controller nothing
      assert.same({[alloc.job_id .. ".0"] = "n3"}, sh.steps(alloc.job_id))
      sb:close()
      sandbox.shutdown(program)
      local job_id = alloc.job_id
      alloc:release()
      local gone, left = sh.job_processes_gone(job_id)
      assert(gone, "processes of job " .. job_id .. " left: " .. tostring(left))
    end)
  end)

  describe("a salloc that fails", function()
    it("names the bad partition, and leaves nothing queued", function()
      local ok, err = pcall(slurm.allocation, {nodes = 1, partition = "bogus"})
      assert.is_false(ok)
      assert.equal("slurm", err.code)
      assert.equal("salloc", err.command[1])
      assert.matches("`salloc %-%-no%-shell .*%-%-partition=bogus` failed with status 1: "
        .. "invalid partition specified: bogus", tostring(err))
      assert.equal("", sh.queue())
    end)

    it("says so when more nodes are asked for than the cluster has", function()
      local ok, err = pcall(slurm.allocation, {nodes = 4})
      assert.is_false(ok)
      assert.equal("slurm", err.code)
      assert.matches("%-%-nodes=4 .*` failed with status 1: .*Node count specification invalid", tostring(err))
    end)

    it("gives up after grant_timeout while the nodes are busy, cancelling its pending job", function()
      local busy = slurm.allocation{nodes = 3}
      local t0 = core.now()
      local ok, err = pcall(slurm.allocation, {nodes = 1, grant_timeout = 1})
      assert.is_false(ok)
      assert.equal("slurm", err.code)
      assert.matches("%-%-immediate=1", tostring(err))
      assert.is_true(core.now() - t0 < h.WAIT)
      assert.equal(busy.job_id .. " RUNNING smolwf\n", sh.queue())
      busy:release()
    end)
  end)

  describe("options", function()
    it("are checked", function()
      for _, case in ipairs{
        {{nodes = 0}, "option nodes must be a positive integer"},
        {{cpus_per_node = 1.5}, "option cpus_per_node must be a positive integer"},
        {{partition = 3}, "option partition must be a string"},
        {{time = {}}, "option time must be a Slurm time string or a number of minutes"},
        {{args = {"--x", 4}}, "option args must be a list of strings"},
        {{job = {}}, "option job must be a job id or false"},
      } do
        assert.has_error(function() slurm.allocation(case[1]) end, "slurm.allocation: " .. case[2])
      end
      assert.equal("", sh.queue())
    end)
  end)

  describe("an existing allocation", function()
    it("is found through salloc's environment and left to salloc to release", function()
      local dir = run_dir()
      local out, code, err = sh.run({"salloc", "-N2", core.exe_path(), RUN, "end", dir}, {timeout = 60})
      assert.equal(0, code, err)
      local report = cjson.decode(out:match("{[^\n]*}"))
      assert.is_false(report.made)
      assert.same({"n1", "n2"}, report.nodes)
      assert.same({n1 = 1, n2 = 1}, report.cpus)
      assert.same({report.job_id .. ".0@n1", report.job_id .. ".1@n2"}, report.steps)
      assert.same({salloc = 0, scontrol = 1, scancel = 0, squeue = 0, srun = 2}, report.calls)
    end)

    it("is found in an sbatch job, whose batch step runs the host", function()
      local dir = run_dir()
      local out_file = dir .. "/job.out"
      local _, code, err = sh.run({"sbatch", "--wait", "-N3", "--exclusive", "--output=" .. out_file,
        "--wrap", sh.quote_all{core.exe_path(), RUN, "end", dir}}, {timeout = 60})
      assert.equal(0, code, err)
      local text = assert(io.open(out_file)):read("a")
      local report = cjson.decode((assert(text:match("{[^\n]*}"), text)))
      assert.is_false(report.made)
      assert.same({"n1", "n2", "n3"}, report.nodes)
      assert.same({n1 = 2, n2 = 2, n3 = 2}, report.cpus)
      local id = report.job_id
      assert.same({id .. ".0@n1", id .. ".1@n2", id .. ".2@n3", id .. ".batch@n1"}, report.steps)
    end)

    it("named by job = ID: its first N nodes", function()
      local job_id = sh.salloc{"-N3"}
      local alloc = slurm.allocation{job = job_id, nodes = 2}
      assert.is_false(alloc.made)
      assert.same({"n1", "n2"}, alloc.nodes)
      alloc:release()   -- not ours: left alone
      assert.matches("^" .. job_id .. " RUNNING", sh.queue())
      local ok, err = pcall(slurm.allocation, {job = job_id, nodes = 4})
      assert.is_false(ok)
      assert.equal("allocation " .. job_id .. " has 3 node(s), 4 asked for", err.message)
      sh.run{"scancel", job_id}
    end)

    it("named by job = ID must exist and be running", function()
      local busy = slurm.allocation{nodes = 3}
      local out, code, err = sh.run{"sbatch", "--parsable", "-N1", "--output=/dev/null", "--wrap", "true"}
      assert.equal(0, code, err)
      local pending = out:match("^(%d+)")
      local ok, e = pcall(slurm.allocation, {job = pending})
      assert.is_false(ok)
      assert.equal("slurm", e.code)
      assert.matches("says job " .. pending .. " is PENDING, not RUNNING", tostring(e))
      sh.run{"scancel", pending}
      busy:release()
      ok, e = pcall(slurm.allocation, {job = 999999})
      assert.is_false(ok)
      assert.matches("`scontrol show job %-d 999999` failed with status 1: .*Invalid job id specified", tostring(e))
    end)
  end)

  describe("at the end of a run", function()
    -- Runs the fixture; returns its result and report once it has exited.
    local function run_fixture(mode, opts)
      opts = opts or {}
      local dir = run_dir()
      local argv = {}
      for _, a in ipairs(opts.prefix or {}) do argv[#argv + 1] = a end
      argv[#argv + 1] = core.exe_path()
      argv[#argv + 1] = RUN
      argv[#argv + 1] = mode
      argv[#argv + 1] = dir
      argv[#argv + 1] = "3"
      local result = sh.run_lines(argv, opts)
      return result, report_of(result)
    end

    -- The run left no job in squeue the moment it exited, and no process.
    local function nothing_left(report)
      assert.equal("", sh.queue())
      local gone, left = sh.job_processes_gone(report.job_id)
      assert(gone, "processes of job " .. report.job_id .. " left: " .. tostring(left))
    end

    it("releases the allocation the run made when it ends normally", function()
      local r, report = run_fixture("end")
      assert.equal(0, r.code, r.err)
      assert.is_true(report.made)
      assert.same({report.job_id .. ".0@n1", report.job_id .. ".1@n2", report.job_id .. ".2@n3"}, report.steps)
      nothing_left(report)
    end)

    it("releases it when the run fails", function()
      local r, report = run_fixture("fail")
      assert.equal(1, r.code)
      assert.matches("the run fails on purpose", r.err)
      nothing_left(report)
    end)

    for _, case in ipairs{{"SIGTERM", "TERM", 143}, {"Ctrl-C (SIGINT)", "INT", 130}} do
      it("releases it on " .. case[1] .. " mid-run, with commands running on every node", function()
        local r, report = run_fixture("hold", {on_line = function(line, p)
          if line:sub(1, 1) == "{" then p:kill(case[2]) end
        end})
        assert.equal(case[3], r.code, r.err)
        nothing_left(report)
      end)
    end

    it("cancels a job still waiting for its grant when the run is stopped", function()
      local busy = slurm.allocation{nodes = 3}
      local dir = run_dir()
      local p = sh.start{core.exe_path(), RUN, "end", dir, "3"}
      assert(h.wait_until(function() return sh.queue():match("%d+ PENDING smolwf") ~= nil end),
        "the run's job never showed as pending: " .. sh.queue())
      p:kill("TERM")
      local r = p:wait()
      assert.equal(143, r.code, r.err)
      assert.equal(busy.job_id .. " RUNNING smolwf\n", sh.queue())
      busy:release()
    end)

    it("releases an unprivileged user's allocation, whose providers run as that user", function()
      local provider_uids = {}
      local r, report = run_fixture("hold", {prefix = sh.AS_NOBODY, on_line = function(line, p)
        if line:sub(1, 1) ~= "{" then return end
        for _, pid in ipairs(sh.job_processes(cjson.decode(line).job_id)) do
          if sh.comm(pid) == "smolwf-provider" then
            local status = assert(io.open("/proc/" .. pid .. "/status")):read("a")
            provider_uids[#provider_uids + 1] = status:match("\nUid:%s+(%d+)")
          end
        end
        p:kill("TERM")
      end})
      assert.equal(143, r.code, r.err)
      assert.is_true(report.made)
      assert.same({"65534", "65534", "65534"}, provider_uids)
      nothing_left(report)
    end)
  end)
end)

describe("smol.slurm.lists", function()
  it("counts CPU ids and expands per-node counts", function()
    assert.equal(1, lists.count_ids("0"))
    assert.equal(3, lists.count_ids("0-1,4"))
    assert.same({2, 2, 2, 1}, lists.expand_counts("2(x3),1"))
    assert.has_error(function() lists.count_ids("0-") end, 'slurm: cannot read the id list "0-"')
    assert.has_error(function() lists.expand_counts("2(3)") end, 'slurm: cannot read the count list "2(3)"')
  end)
end)
