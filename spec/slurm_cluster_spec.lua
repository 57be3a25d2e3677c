-- The test cluster (.ci/slurm-up) and the bundled provider placed on its
-- nodes by srun: real slurmctld, slurmd and munged on this machine.
local sandbox = require "smol.sandbox"
local sh = dofile("spec/fixtures/slurm_helpers.lua")
local h = sh.h

-- Lines "TASK: TEXT" of `srun -l` as {TASK = TEXT}.
local function labelled(out)
  local by_task = {}
  for task_id, text in out:gmatch("(%d+): ([^\n]*)") do by_task[tonumber(task_id)] = text end
  return by_task
end

-- `srun -u --jobid=J -N1 -n1 -w NODE --kill-on-bad-exit PROVIDER` (after
-- prefix; without a job id srun makes an allocation of its own), as a
-- wrapper that sandbox.open runs with `serve` appended.
local function provider_step(job_id, node, prefix)
  local argv = {table.unpack(prefix or {})}
  argv[#argv + 1] = "srun"
  argv[#argv + 1] = "-u"
  if job_id then argv[#argv + 1] = "--jobid=" .. job_id end
  for _, a in ipairs{"-N1", "-n1", "-w", node, "--kill-on-bad-exit=1", sh.PROVIDER} do argv[#argv + 1] = a end
  return sh.wrapper(argv)
end

-- The provider process of job_id (there is one), or nil.
local function provider_of(job_id)
  for _, pid in ipairs(sh.job_processes(job_id)) do
    if sh.comm(pid) == "smolwf-provider" then return pid end
  end
end

describe("the test cluster", function()
  before_each(sh.assert_queue_empty)

  after_each(function()
    sandbox.shutdown()
    h.cleanup()
    sh.assert_queue_empty()
  end)

  it("has nodes n1, n2 and n3, all idle", function()
    local out, code = sh.run{"sinfo", "--noheader", "--Node", "--format=%N %T"}
    assert.equal(0, code)
    assert.equal("n1 idle\nn2 idle\nn3 idle\n", out)
  end)

  it("lets a second cluster run beside it, on ports of its own, and stop without a trace", function()
    local link = h.tempdir() .. "/second"
    local out, code, err = sh.run({"bash", ".ci/slurm-up", link}, {timeout = 60})
    assert.equal(0, code, err)
    local dir = assert(out:match("%((/tmp/smolwf%-slurm%.[%w]+),"), out)
    local function port(conf)
      return assert(io.open(conf)):read("a"):match("\nSlurmctldPort=(%d+)")
    end
    assert.are_not.equal(port(os.getenv("SLURM_CONF")), port(link .. "/slurm.conf"))
    local function in_second(...)
      return sh.run{"env", "SLURM_CONF=" .. link .. "/slurm.conf", ...}
    end
    assert.matches("^%d+", (in_second("sbatch", "--parsable", "-N1", "--output=/dev/null", "--wrap", "sleep 300")))
    assert.equal("", sh.queue())             -- its job is not ours
    assert.is_true(h.wait_until(function()
      return in_second("squeue", "--noheader", "--format=%T %j") == "RUNNING wrap\n"
    end))
    out, code, err = in_second("srun", "-N3", "-l", "printenv", "SLURMD_NODENAME")
    assert.equal(0, code, err)
    assert.same({[0] = "n1", [1] = "n2", [2] = "n3"}, labelled(out))
    _, code, err = sh.run({"bash", ".ci/slurm-down", link}, {timeout = 60})
    assert.equal(0, code, err)
    assert.is_nil(io.open(dir .. "/slurm.conf"))
    assert.is_nil(io.open(link .. "/slurm.conf"))
    out = sh.run{"sinfo", "--noheader", "--Node", "--format=%N %T"}
    assert.equal("n1 idle\nn2 idle\nn3 idle\n", out)
  end)

  it("runs `srun -N3 -n3 -l` with one task on each of n1, n2 and n3", function()
    local out, code, err = sh.run{"srun", "-N3", "-n3", "-l", "printenv", "SLURMD_NODENAME"}
    assert.equal(0, code, err)
    assert.same({[0] = "n1", [1] = "n2", [2] = "n3"}, labelled(out))
  end)

  it("serves a bwrap session from a provider that srun placed on n2 inside an allocation", function()
    local job_id = sh.salloc{"-N3"}
    local workspace = h.tempdir()
    assert(io.open(workspace .. "/input.txt", "w")):write("from the host\n"):close()
    local program = provider_step(job_id, "n2")
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = workspace}
    assert.equal("namespaces", sb.capabilities.isolation)
    local r = sb:exec{"sh", "-c", "cat input.txt; echo made here > output.txt; cat /proc/self/uid_map"}
    assert.equal(0, r.exit_code, r.stderr)
    assert.matches("^from the host\n", r.stdout)
    assert.equal("made here\n", sb:read_file("output.txt"))
    -- Slurm placed the step on n2, and the provider runs as that step
    assert.same({[job_id .. ".0"] = "n2"}, sh.steps(job_id))
    local pid = assert(provider_of(job_id), "no provider process of job " .. job_id)
    assert.equal("n2", sh.env_of(pid, "SLURMD_NODENAME"))
    sb:close()
    sandbox.shutdown(program)
    assert.same({}, sh.steps(job_id))   -- the step ended with the provider
    local _, code = sh.run{"scancel", job_id}
    assert.equal(0, code)
    local empty, listed = sh.queue_empties()
    assert(empty, "still in squeue: " .. tostring(listed))
    local gone, left = sh.job_processes_gone(job_id)
    assert(gone, "processes of job " .. job_id .. " left: " .. tostring(left))
  end)

  it("ends the step and its provider when the allocation is cancelled under an open session", function()
    local job_id = sh.salloc{"-N1", "-w", "n3"}
    local program = provider_step(job_id, "n3")
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = h.tempdir()}
    local sleeper = sb:spawn{"sleep", "300"}
    assert.is_not_nil(provider_of(job_id))
    assert.equal(0, select(2, sh.run{"scancel", job_id}))
    -- the step's TERM reaches the provider, which ends its sessions (the
    -- sleep is reported killed) and exits; or it is gone before it answers
    local ok, r = pcall(sleeper.wait, sleeper)
    if ok then
      assert.is_false(r.ok)
      assert.is_not_nil(r.signal)
    else
      assert.equal("provider_exited", r.code)
    end
    assert.is_true(h.wait_until(function() return sandbox.connection(program) == nil end))
    local gone, left = sh.job_processes_gone(job_id)
    assert(gone, "processes of job " .. job_id .. " left: " .. tostring(left))
    sb:close()
  end)

  it("places a provider for an unprivileged user, whose session runs as that user", function()
    -- srun as nobody, without --jobid: the step runs in nobody's own allocation
    local program = provider_step(nil, "n3", sh.AS_NOBODY)
    local workspace = h.tempdir()
    assert(os.execute("chmod 755 " .. workspace))
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = workspace}
    local r = sb:exec{"sh", "-c", "echo ok > f; cat f"}
    assert.equal(0, r.exit_code, r.stderr)
    assert.equal("ok\n", r.stdout)
    local queue = sh.queue()
    local job_id = assert(queue:match("^(%d+) RUNNING "), queue)
    local pid = assert(provider_of(job_id))
    local status = assert(io.open("/proc/" .. pid .. "/status")):read("a")
    assert.matches("\nUid:%s+65534%s", status)
    assert.equal("n3", sh.env_of(pid, "SLURMD_NODENAME"))
    sb:close()
    sandbox.shutdown(program)
    local gone, left = sh.job_processes_gone(job_id)
    assert(gone, "processes of job " .. job_id .. " left: " .. tostring(left))
  end)
end)
