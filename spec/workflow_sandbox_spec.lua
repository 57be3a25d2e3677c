-- Workflow steps against the real bundled provider (local/default profile:
-- the fastest, and its processes are host processes whose pids we can check).
local wf = require "smol.workflow"
local sandbox = require "smol.sandbox"
local task = require "smol.task"
local h = require "spec.workflow_helpers"

local PROFILE = "local/default"
-- An empty workspace: the default (".") would copy the whole repo at each open.
local SANDBOX = { profile = PROFILE, workspace = "" }

local function run(def, opts)
  opts = opts or {}
  opts.report_dir = opts.report_dir or h.temp_dir()
  if opts.reports == nil then opts.reports = false end
  def.sandbox = def.sandbox or SANDBOX
  return wf.run(wf.define(def), opts)
end

-- Counts the sessions a run opens.
local function counting_open()
  local counter = { n = 0 }
  counter.open = function(spec)
    counter.n = counter.n + 1
    return sandbox.open(spec)
  end
  return counter
end

local function pid_file_step(name, pidfile, extra)
  local s = { name = name, run = function(ctx)
    ctx:sh("echo $$ > " .. pidfile .. "; exec sleep 30")
  end }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

describe("workflow steps in a sandbox", function()
  after_each(h.cleanup)

  it("runs ctx:sh, streams its output to observers and records the exit code", function()
    local chunks = {}
    local obs = { step_output = function(_, _, inst, stream, chunk)
      chunks[#chunks + 1] = inst.id .. " " .. stream .. " " .. chunk
    end }
    local r = run({ steps = { { name = "hello", run = function(ctx)
      local res = ctx:sh("echo out; echo err >&2")
      assert.are.equal("out\n", res.stdout)
      return res.exit_code
    end } } }, { observers = { obs } })
    assert.are.equal("success", r.result)
    assert.are.same({ "hello stdout out\n", "hello stderr err\n" }, chunks)
    local inst = r.instances[1]
    assert.are.equal(0, inst.exit_code)
    assert.are.equal("err", inst.last_line)
  end)

  it("fails a step on a non-zero exit, naming the command, code and stderr tail", function()
    local r = run { steps = { { name = "bad", run = function(ctx)
      ctx:sh("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line$i >&2; done; exit 3")
    end } } }
    local inst = r.instances[1]
    assert.are.equal("failed", inst.status)
    assert.are.equal(3, inst.exit_code)
    assert.matches("^command `for i in .*exit 3` failed with exit code 3\nlast lines of stderr:\nline3\n", inst.error)
    assert.matches("line12$", inst.error)
    assert.is_nil(inst.error:find("line2\n", 1, true))
  end)

  it("retries on the failing command's exit code", function()
    local r = run { steps = { { name = "flaky",
      retry = { attempts = 3, when = function(f) return f.exit_code == 75 end },
      run = function(ctx) ctx:sh("if [ -e tried ]; then exit 0; fi; touch tried; exit 75") end } } }
    local inst = r.instances[1]
    assert.are.equal("success", inst.status)
    assert.are.equal(2, #inst.attempts)
    assert.are.equal(75, inst.attempts[1].exit_code)
  end)

  it("shares the workflow's session between steps; a step's own sandbox is separate", function()
    local counter = counting_open()
    local r = run({ steps = {
      { name = "write", run = function(ctx) ctx:write_file("shared.txt", "from write") end },
      { name = "read", needs = "write", run = function(ctx) return ctx:read_file("shared.txt") end },
      { name = "own", needs = "write", sandbox = SANDBOX,
        run = function(ctx) return ctx:exec { "test", "-e", "shared.txt" }.exit_code end },
      { name = "check", needs = { "read", "own" }, run = function(ctx)
        assert.are.equal("from write", ctx.inputs.read)
        assert.are.equal(1, ctx.inputs.own)
      end },
    } }, { open = counter.open })
    assert.are.equal("success", r.result)
    assert.are.equal(2, counter.n)
  end)

  it("opens no session for steps that never touch the sandbox", function()
    local counter = counting_open()
    local r = run({ steps = { { name = "pure", run = function() return 1 end } } }, { open = counter.open })
    assert.are.equal("success", r.result)
    assert.are.equal(0, counter.n)
  end)

  it("opens a shared session once when steps start together", function()
    local counter = counting_open()
    local steps = {}
    for i = 1, 4 do
      steps[i] = { name = "s" .. i, run = function(ctx) ctx:exec { "true" } end }
    end
    run({ jobs = 4, steps = steps }, { open = counter.open })
    assert.are.equal(1, counter.n)
  end)

  it("fails every step of a session that cannot open, with the open error", function()
    local r = run { sandbox = { profile = "nosuch/profile" }, steps = {
      { name = "a", run = function(ctx) ctx:exec { "true" } end },
    } }
    assert.are.equal("failed", r.instances[1].status)
    assert.matches("nosuch", r.instances[1].error)
  end)

  it("copies the workspace in and saves files and directories as artifacts", function()
    local ws = h.temp_dir()
    os.execute("mkdir -p " .. ws .. " && echo input > " .. ws .. "/in.txt")
    local report = h.temp_dir()
    local r = run({ sandbox = { profile = PROFILE, workspace = ws }, steps = {
      { name = "make", run = function(ctx)
        ctx:sh("mkdir -p out/sub && cp in.txt out/a.txt && printf '\\0\\1\\377' > out/sub/b.bin")
        ctx:save_artifact("out")
        ctx:save_artifact("in.txt", "renamed.txt")
      end },
    } }, { report_dir = report })
    assert.are.equal("success", r.result)
    assert.are.same({ "artifacts/make/out", "artifacts/make/renamed.txt" }, r.instances[1].artifacts)
    assert.are.equal("input\n", h.read(report .. "/artifacts/make/out/a.txt"))
    assert.are.equal("\0\1\255", h.read(report .. "/artifacts/make/out/sub/b.bin"))
    assert.are.equal("input\n", h.read(report .. "/artifacts/make/renamed.txt"))
  end)

  it("saves artifacts in an always step after a failure", function()
    local report = h.temp_dir()
    local r = run({ steps = {
      { name = "test", run = function(ctx)
        ctx:sh("mkdir -p logs && echo 'test 3 failed' > logs/test.log && exit 1")
      end },
      { name = "collect", needs = "test", always = true,
        run = function(ctx) ctx:save_artifact("logs/test.log") end },
    } }, { report_dir = report })
    assert.are.same({ test = "failed", collect = "success" }, h.statuses(r))
    assert.are.equal("test 3 failed\n", h.read(report .. "/artifacts/collect/test.log"))
  end)

  it("says a missing artifact does not exist in the session, naming its path", function()
    local r = run({ sandbox = { profile = PROFILE }, steps = {
      { name = "a", run = function(ctx) ctx:sh("mkdir -p out"); ctx:save_artifact("out/missing.log") end },
      { name = "b", run = function(ctx) ctx:save_artifact("nodir/x") end },
    } }, { keep_going = true })
    assert.are.equal('save_artifact("out/missing.log") failed: not_found: `out/missing.log` does not exist in the session',
      h.find(r, "a").error)
    assert.are.equal('save_artifact("nodir/x") failed: not_found: `nodir/x` does not exist in the session',
      h.find(r, "b").error)
  end)

  it("refuses artifact names that leave the report directory", function()
    local r = run { steps = { { name = "a", run = function(ctx)
      ctx:write_file("x", "1")
      ctx:save_artifact("x", "../../escape")
    end } } }
    assert.matches("artifact name '%.%./%.%./escape' must not contain '%.%.'", r.instances[1].error)
  end)

  it("kills a timed-out step's process", function()
    local pidfile = h.temp_dir()
    -- The session opens first, so that the timeout only covers the command.
    local r = run { steps = {
      { name = "warm", run = function(ctx) ctx:exec { "true" } end },
      pid_file_step("hang", pidfile, { timeout = 0.3, needs = "warm" }),
    } }
    local inst = h.find(r, "hang")
    assert.are.equal("timed_out", inst.status)
    assert.matches("timed out after 0.3s", inst.error)
    local pid = assert(h.read_pid(pidfile, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
    assert.is_true(inst.duration < 5)
  end)

  it("times out a step that swallows the cancel and spins, still killing its process", function()
    local pidfile = h.temp_dir()
    local r = run { steps = {
      { name = "warm", run = function(ctx) ctx:exec { "true" } end },
      { name = "stubborn", needs = "warm", timeout = 0.3, run = function(ctx)
        pcall(ctx.sh, ctx, "echo $$ > " .. pidfile .. "; exec sleep 30")
        while true do end
      end },
    } }
    assert.are.equal("timed_out", h.find(r, "stubborn").status)
    local pid = assert(h.read_pid(pidfile, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
  end)

  it("cancels running steps when another fails, killing their processes", function()
    local pidfile = h.temp_dir()
    local r = run { steps = {
      pid_file_step("slow", pidfile),
      { name = "bad", run = function()
        h.read_pid(pidfile, 5)
        error("bad step", 0)
      end },
    } }
    assert.are.same({ slow = "cancelled", bad = "failed" }, h.statuses(r))
    local pid = assert(h.read_pid(pidfile, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
    assert.is_true(h.find(r, "slow").duration < 5)
  end)

  it("kills processes a step spawned and left running", function()
    local pidfile = h.temp_dir()
    local r = run { steps = { { name = "bg", run = function(ctx)
      ctx:spawn { "sh", "-c", "echo $$ > " .. pidfile .. "; exec sleep 30" }
      h.read_pid(pidfile, 5)
    end } } }
    assert.are.equal("success", r.result)
    local pid = assert(h.read_pid(pidfile, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
  end)

  it("runs matrix instances' commands concurrently, up to jobs", function()
    local running, peak = 0, 0
    local r = run({ jobs = 3, steps = { { name = "nap", matrix = { n = { 1, 2, 3, 4, 5 } },
      run = function(ctx)
        running = running + 1
        peak = math.max(peak, running)
        ctx:sh("sleep 0.2")
        running = running - 1
      end } } })
    assert.are.equal("success", r.result)
    assert.are.equal(3, peak)
  end)

  it("saves symlinks as what they point to inside the sandbox, and keeps file modes", function()
    local report = h.temp_dir()
    local r = run({ steps = {
      { name = "a", run = function(ctx)
        ctx:sh("mkdir -p out/d && echo top > out/d/f && printf '#!/bin/sh\\n' > out/tool"
          .. " && chmod 755 out/tool && chmod 600 out/d/f && ln -s d out/dirlink && ln -s d/f out/filelink")
        ctx:save_artifact("out")
        ctx:save_artifact("out/filelink", "top_link")
      end },
    } }, { report_dir = report })
    assert.are.equal("success", r.result, r.instances[1].error)
    local base = report .. "/artifacts/a/"
    assert.are.equal("top\n", h.read(base .. "out/dirlink/f"))
    assert.are.equal("top\n", h.read(base .. "out/filelink"))
    assert.are.equal("top\n", h.read(base .. "top_link"))
    local lfs = require "lfs"
    assert.are.equal("rwxr-xr-x", lfs.attributes(base .. "out/tool", "permissions"))
    assert.are.equal("rw-------", lfs.attributes(base .. "out/d/f", "permissions"))
    assert.are.same({ "artifacts/a/out", "artifacts/a/top_link" }, r.instances[1].artifacts)
  end)

  it("fails a save loudly on a link out of the sandbox, listing and leaving nothing", function()
    local report = h.temp_dir()
    local r = run({ steps = {
      { name = "a", run = function(ctx)
        ctx:sh("mkdir -p out && echo x > out/kept && ln -s /etc/passwd out/escape")
        ctx:save_artifact("out")
      end },
    } }, { report_dir = report })
    local inst = r.instances[1]
    assert.are.equal("failed", inst.status)
    assert.matches('save_artifact%("out"%) failed: permission_denied: symlink `out/escape` points outside the sandbox', inst.error)
    assert.are.same({}, inst.artifacts)
    local lfs = require "lfs"
    assert.is_nil(lfs.attributes(report .. "/artifacts/a"), "no empty folder after a failed save")
    assert.is_nil(lfs.attributes(report .. "/artifacts"))
  end)

  it("records the profile, isolation and network each session really got", function()
    local seen = {}
    local obs = { session_opened = function(_, _, info) seen[#seen + 1] = info.key end }
    local r = run({ steps = {
      { name = "a", run = function(ctx) ctx:exec { "true" } end },
      { name = "b", sandbox = SANDBOX, run = function(ctx) ctx:exec { "true" } end },
    } }, { observers = { obs } })
    assert.are.equal("success", r.result)
    assert.are.same({ profile = PROFILE, provider_profile = PROFILE, isolation = "none",
      network = true, key = "workflow", program = r.sandbox.program }, r.sandbox)
    assert.are.equal("none", h.find(r, "a").sandbox.isolation)
    assert.are.equal(PROFILE, h.find(r, "b").sandbox.profile)
    assert.are.equal(2, #r.sessions)
    table.sort(seen)
    assert.are.same({ "step:b", "workflow" }, seen)
    local cli = require "smol.cli.run"
    assert.are.equal("local/default (no isolation, network on)", cli.describe_sandbox(r.sandbox))
  end)

  it("reports ctx:exec misuse at the step's own line", function()
    local line
    local r = run({ steps = {
      { name = "empty", run = function(ctx) line = debug.getinfo(1, "l").currentline; ctx:exec {} end },
      { name = "number", run = function(ctx) ctx:exec { "echo", 5 } end },
      { name = "file", run = function(ctx) ctx:read_file(42) end },
    } }, { keep_going = true })
    assert.matches("workflow_sandbox_spec%.lua:" .. line .. ": sandbox: exec: argv is empty",
      h.find(r, "empty").error)
    assert.matches("workflow_sandbox_spec%.lua:%d+: sandbox: exec: argv%[2%] must be a string",
      h.find(r, "number").error)
    assert.matches("^[^\n]*workflow_sandbox_spec%.lua:%d+: ", h.find(r, "file").error)
  end)

  it("keeps the live line of a huge output short, and the last line of each chunk", function()
    local lines = {}
    local obs = { step_output = function(_, _, inst) lines[#lines + 1] = inst.last_line end }
    local r = run({ steps = { { name = "a", run = function(ctx)
      ctx:sh("head -c 300000 /dev/zero | tr '\\0' 'x'; printf '\\nlast one\\r\\n\\n'", { capture = false })
    end } } }, { observers = { obs } })
    assert.are.equal("success", r.result)
    assert.are.equal("last one", r.instances[1].last_line)
    for _, l in ipairs(lines) do assert.is_true(#l <= 1024, "live line of " .. #l .. " bytes") end
  end)

  it("names the exit code, not the command, in the retry note", function()
    local notes = {}
    local obs = { step_retry = function(_, _, _, _, _, err) notes[#notes + 1] = err end }
    run({ steps = { { name = "a", retry = { attempts = 2 }, run = function(ctx)
      ctx:sh("echo some long command line; exit 75")
    end } } }, { observers = { obs } })
    assert.are.same({ "exit code 75" }, notes)
  end)

  it("records no exit code for a step whose provider died", function()
    local pidfile = h.temp_dir()
    local r = run { steps = { { name = "a", run = function(ctx)
      ctx:sh("true")
      local conn = ctx:session():connection()
      task.spawn(function()
        h.read_pid(pidfile, 5)
        conn:kill("KILL")
      end)
      ctx:sh("echo $$ > " .. pidfile .. "; exec sleep 5")
    end } } }
    local inst = r.instances[1]
    assert.are.equal("failed", inst.status)
    assert.is_nil(inst.exit_code)
    assert.is_nil(inst.attempts[1].exit_code)
    local pid = h.read_pid(pidfile, 0)
    if pid and h.alive(pid) then os.execute("kill -KILL " .. pid) end
  end)

  it("works when called from inside a task", function()
    local r = task.spawn(function()
      return run { steps = { { name = "a", run = function(ctx) return ctx:sh("echo hi").stdout end } } }
    end):join()
    assert.are.equal("success", r.result)
  end)
end)
