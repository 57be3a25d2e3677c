-- The bundled provider's bubblewrap sessions (bwrap/default, bwrap/network, auto/default):
-- isolation that really holds, one sandbox per session, fail-closed, unprivileged use.
-- Runs inside the host: /path/to/smolwf /usr/bin/busted --ignore-lua spec/provider_bwrap_spec.lua
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local errors = require "smol.errors"
local h = dofile("spec/fixtures/helpers.lua")

local PROVIDER = core.bundled_provider()
local IS_ROOT = io.popen("id -u"):read("l") == "0"

-- A program that runs the real provider with extra environment or as another user.
local function wrapper(opts)
  local dir = h.tempdir()
  local path = dir .. "/provider"
  local env = {}
  for k, v in pairs(opts.env or {}) do env[#env + 1] = k .. "=" .. h.shell_quote(v) end
  local f = assert(io.open(path, "w"))
  f:write("#!/bin/sh\nexec env ", table.concat(env, " "), " ", opts.prefix or "",
          " ", h.shell_quote(PROVIDER), ' "$@"\n')
  f:close()
  assert(os.execute("chmod 755 " .. h.shell_quote(path)))
  return path
end

-- Host processes whose command line contains marker (the bracket keeps pgrep's own shell out).
local function host_procs(marker)
  local p = io.popen(("pgrep -f %s"):format(h.shell_quote("[" .. marker:sub(1, 1) .. "]" .. marker:sub(2))))
  local out = p:read("a")
  p:close()
  return out
end

local function sh(sb, script, opts)
  local spec = {"sh", "-c", script}
  for k, v in pairs(opts or {}) do spec[k] = v end
  return sb:exec(spec)
end

local function open(profile, extra)
  local opts = {profile = profile or "bwrap/default", workspace = h.tempdir()}
  for k, v in pairs(extra or {}) do opts[k] = v end
  return sandbox.open(opts)
end

describe("bwrap sessions of the bundled provider", function()
  after_each(function()
    sandbox.shutdown()
    h.cleanup()
  end)

  it("announce namespaces without network, and run in /workspace", function()
    local sb = open()
    assert.equal("namespaces", sb.capabilities.isolation)
    assert.is_false(sb.capabilities.network)
    assert.equal("/workspace", sb.cwd)
    local r = sh(sb, 'pwd; echo "$HOME $TMPDIR"; hostname')
    assert.equal("/workspace\n/workspace /tmp\nsandbox\n", r.stdout)
  end)

  it("start commands as SCHED_OTHER and with no signal blocked or ignored", function()
    local sb = open()
    -- field 41 of stat: 0 = SCHED_OTHER (the helper, pid 1, too while a command runs)
    assert.equal("0\n0\n", sh(sb, [[cut -d' ' -f41 /proc/$$/stat /proc/1/stat]]).stdout)
    -- the command's own status: a shell's shows what it blocks while it waits for a child
    local r = sb:exec{"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}
    assert.equal("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n", r.stdout)
  end)

  it("signal a command's group through the helper, after its leader exited too", function()
    local sb = open()
    -- the leader exits at once; the background sleep holds stdout, so only
    -- the timeout's TERM to the (leaderless) group can end the exec
    local t0 = core.now()
    local r = sh(sb, "sleep 30 & echo started", {timeout = 0.3})
    assert.equal("wall", r.timed_out)
    assert.equal("started\n", r.stdout)
    assert.is_true(core.now() - t0 < 10)
    -- and a running command's group, by kill on its process_id
    local p = sb:spawn{"sh", "-c", "sleep 30 & sleep 30"}
    p:kill("KILL")
    assert.equal(137, p:wait().exit_code)
  end)

  it("have no network in bwrap/default, and the host's in bwrap/network", function()
    local function interfaces(sb)
      local r = sh(sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort")
      assert.equal(0, r.exit_code, r.stderr)
      return r.stdout
    end
    assert.equal("lo\n", interfaces(open("bwrap/default")))
    local host = io.open("/proc/net/dev"):read("a")
    local with_net = open("bwrap/network")
    assert.is_true(with_net.capabilities.network)
    local seen = interfaces(with_net)
    for name in host:gmatch("\n%s*([%w_.-]+):") do
      assert.matches("\n?" .. name:gsub("%p", "%%%0") .. "\n", seen)
    end
  end)

  it("share /tmp between the commands of one session, not between sessions", function()
    local a, b = open(), open()
    assert.equal(0, sh(a, "echo from-a > /tmp/shared").exit_code)
    assert.equal("from-a\n", sh(a, "cat /tmp/shared").stdout)
    local r = sh(b, "cat /tmp/shared")
    assert.equal(1, r.exit_code)
    assert.matches("No such file", r.stderr)
    -- the provider serves file operations on the same /tmp
    assert.equal("from-a\n", a:read_file("/tmp/shared"))
    b:write_file("/tmp/from-b", "b")
    assert.equal("b", sh(b, "cat /tmp/from-b").stdout)
  end)

  it("give each session its own pid namespace, shared by its commands", function()
    local a, b = open(), open()
    assert.equal("2\n", sh(a, "echo $$").stdout)   -- pid 1 is the session's helper
    local sleeper = a:spawn{"sleep", "30"}
    local function sleeps(sb)
      return sh(sb, "cat /proc/[0-9]*/comm | grep -c '^sleep$'").stdout
    end
    assert.equal("1\n", sleeps(a))
    assert.equal("0\n", sleeps(b))
    sleeper:kill("KILL")
    assert.equal(137, sleeper:wait().exit_code)
  end)

  it("copy the workspace in and never change the host's files", function()
    local ws = h.tempdir()
    local f = assert(io.open(ws .. "/keep.txt", "w"))
    f:write("original")
    f:close()
    local sb = sandbox.open{profile = "bwrap/default", workspace = ws}
    local r = sh(sb, "cat keep.txt; echo changed > keep.txt; rm -f keep.txt; echo new > made.txt")
    assert.equal("original", r.stdout)
    assert.equal("new\n", sb:read_file("made.txt"))
    assert.equal("original", io.open(ws .. "/keep.txt"):read("a"))
    assert.is_nil(io.open(ws .. "/made.txt"))
  end)

  it("keep system directories read-only and the host's private ones out of sight", function()
    local sb = open()
    local r = sh(sb, "touch /usr/smolwf-x 2>&1; touch /etc/smolwf-x 2>&1; ls -d /home /root /var 2>&1; true")
    assert.matches("/usr/smolwf%-x.*Read%-only file system", r.stdout)
    assert.matches("/etc/smolwf%-x.*Read%-only file system", r.stdout)
    assert.matches("/home.*No such file", r.stdout)
    assert.matches("/root.*No such file", r.stdout)
    assert.is_nil(io.open("/usr/smolwf-x"))
    assert.equal("0\n", sh(sb, "cat /etc/shadow 2>/dev/null | wc -c").stdout)
    assert.equal("CapEff:\t0000000000000000\n", sh(sb, "grep CapEff /proc/self/status").stdout)
  end)

  it("report a missing program as 127 naming it, as under every profile", function()
    local r = open():exec{"no-such-program-xyz"}
    assert.equal(127, r.exit_code)
    assert.matches("no%-such%-program%-xyz", r.stderr)
  end)

  it("kill a command's whole process group inside the sandbox", function()
    local sb = open()
    local p = sb:spawn{"sh", "-c", "sleep 30 & sleep 30; wait"}
    assert.is_true(h.wait_until(function() return sh(sb, "cat /proc/[0-9]*/comm | grep -c '^sleep$'").stdout == "2\n" end))
    p:kill("TERM")
    local r = p:wait()
    assert.equal(143, r.exit_code)
    assert.equal("TERM", r.signal)
    assert.is_true(h.wait_until(function() return sh(sb, "cat /proc/[0-9]*/comm | grep -c '^sleep$'").stdout == "0\n" end))
  end)

  it("survive a command that signals the helper, pid 1", function()
    local sb = open()
    sh(sb, "kill -KILL 1; kill -TERM 1; true")
    assert.equal("still here\n", sh(sb, "echo still here").stdout)
  end)

  it("survive reaping an orphan before any command of the session ended", function()
    local sb = open()
    -- the background sleep's parent exits, so the helper (pid 1) reaps it
    -- while the session's first command still runs (the ASan+UBSan build caught
    -- the helper flushing its still unmade report queue there)
    local r = sh(sb, "(sleep 0.1 &); sleep 0.5; echo ok")
    assert.equal(0, r.exit_code, r.stderr)
    assert.equal("ok\n", r.stdout)
  end)

  it("kill every process of a session at close, daemons included, and remove its files", function()
    local marker = tostring(31000 + math.random(0, 999)) .. "." .. tostring(math.random(100, 999))
    local runtime = h.tempdir()
    local program = wrapper{env = {XDG_RUNTIME_DIR = runtime}}
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = h.tempdir()}
    -- a background job and a double-forked daemon in its own session: both outlive their exec
    -- (their output goes elsewhere: an exec ends when its pipes close)
    local quiet = " >/dev/null 2>&1 &"
    local r = sh(sb, "echo data > /tmp/t; sleep " .. marker .. quiet ..
                     " setsid sh -c 'sleep " .. marker .. quiet .. "'" .. quiet)
    assert.equal(0, r.exit_code)
    assert.is_true(h.wait_until(function() return select(2, host_procs("sleep " .. marker):gsub("\n", "")) == 2 end))
    local function session_dirs()
      local p = io.popen("ls " .. h.shell_quote(runtime) .. "/smolwf-provider.*/ 2>/dev/null")
      local out = p:read("a")
      p:close()
      return out
    end
    assert.equal("s1\n", session_dirs())
    sb:close()
    assert.equal("", host_procs("sleep " .. marker))
    assert.equal("", session_dirs())
    assert.equal("", host_procs("bwrap .*" .. runtime))
  end)

  it("fail their commands promptly, and still close, when the sandbox dies under them", function()
    -- a private runtime dir makes this session's bwrap findable on the host, and only it
    local runtime = h.tempdir()
    local sb = sandbox.open{program = wrapper{env = {XDG_RUNTIME_DIR = runtime}},
                            profile = "bwrap/default", workspace = h.tempdir()}
    local sleeper = sb:spawn{"sleep", "30"}
    local bwrap = host_procs("bwrap .*" .. runtime):match("^(%d+)")
    assert.is_not_nil(bwrap)
    assert(os.execute("kill -KILL " .. bwrap))
    local r = sleeper:wait()
    assert.equal(137, r.exit_code)
    local e = h.catch(sb.exec, sb, {"true"})
    assert.is_not_nil(e)
    assert.matches("cannot start `true`", e.message)
    sb:close()
  end)

  it("relay what the sandbox helper reports on its stderr to the provider's stderr, naming the session", function()
    local yama = io.open("/proc/sys/kernel/yama/ptrace_scope")
    local scope = yama and tonumber(yama:read("l")) or 0
    if yama then yama:close() end
    if scope > 0 and not IS_ROOT then
      pending("Yama's ptrace_scope " .. scope .. " keeps an ordinary user's strace from the helper")
      return
    end
    local runtime = h.tempdir()
    local program = wrapper{env = {XDG_RUNTIME_DIR = runtime}}
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = h.tempdir()}
    local bwrap = host_procs("bwrap .*" .. runtime):match("^(%d+)")
    local helper = io.popen("pgrep -P " .. bwrap):read("l")
    assert.is_not_nil(helper)
    -- the helper's next poll fails (it says so on its stderr, and ends): once strace holds it, a command wakes it
    assert(os.execute("timeout 20 strace -qq -o /dev/null -p " .. helper ..
                      " -e trace=poll -e inject=poll:error=EBADF >/dev/null 2>&1 &"))
    assert.is_true(h.wait_until(function()
      local status = io.open("/proc/" .. helper .. "/status")
      local traced = status and not status:read("a"):find("TracerPid:%s+0\n")
      if status then status:close() end
      return traced
    end))
    pcall(sb.exec, sb, {"true"})
    local conn = sandbox.connection(program)
    assert.is_true(h.wait_until(function()
      return table.concat(conn.stderr_tail, "\n"):find("session s1's sandbox: smolwf-provider helper: poll: ", 1, true) ~= nil
    end), table.concat(conn.stderr_tail, "\n"))
    sb:close()
  end)

  it("keep the provider's own environment out of commands", function()
    local program = wrapper{env = {SMOLWF_SPEC_SECRET = "leak"}}
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = h.tempdir()}
    local r = sb:exec{"env", env = {MINE = "1"}}
    assert.not_matches("SMOLWF_SPEC_SECRET", r.stdout)
    assert.matches("MINE=1", r.stdout)
    assert.matches("HOME=/workspace", r.stdout)
  end)

  describe("where bubblewrap cannot run", function()
    local function refused(program, profile)
      local e = h.catch(sandbox.open, {program = program, profile = profile, workspace = h.tempdir()})
      assert.is_true(errors.is(e, "unsupported"), tostring(e))
      assert.matches("local/default", e.message)
      return e.message
    end

    it("refuse bwrap profiles saying why, when bwrap is not installed", function()
      local program = wrapper{env = {PATH = "/nonexistent"}}
      assert.matches("not installed or not in PATH", refused(program, "bwrap/default"))
      assert.matches("not installed", refused(program, "bwrap/network"))
    end)

    it("refuse bwrap profiles with bwrap's own words when it fails", function()
      local dir = h.tempdir()
      local fake = dir .. "/bwrap"
      local f = assert(io.open(fake, "w"))
      f:write("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
      f:close()
      os.execute("chmod 755 " .. h.shell_quote(fake))
      local msg = refused(wrapper{env = {SMOLWF_BWRAP = fake}}, "bwrap/default")
      assert.matches("No permissions to create new namespace", msg)
    end)

    it("let auto/default fall back to local/default and say so", function()
      local program = wrapper{env = {SMOLWF_BWRAP = "/nonexistent/bwrap"}}
      local sb = sandbox.open{program = program, profile = "auto/default", workspace = h.tempdir()}
      assert.equal("none", sb.capabilities.isolation)
      assert.is_true(sb.capabilities.network)
      assert.equal(0, sb:exec{"true"}.exit_code)
      local described = {}
      for _, p in ipairs(sandbox.connection(program):request("describe", {}).profiles) do
        described[p.name] = p.isolation
      end
      assert.equal("none", described["auto/default"])
    end)
  end)

  it("pick bwrap for auto/default where it works", function()
    local sb = open("auto/default")
    assert.equal("namespaces", sb.capabilities.isolation)
    assert.is_false(sb.capabilities.network)
    assert.equal("2\n", sh(sb, "echo $$").stdout)
  end)

  describe("run by an unprivileged user", function()
    it("still isolate, as that user", function()
      if not IS_ROOT then
        -- the whole file already runs unprivileged
        assert.equal("namespaces", open().capabilities.isolation)
        return
      end
      local program = wrapper{prefix = "setpriv --reuid=nobody --regid=nogroup --clear-groups",
                              env = {XDG_RUNTIME_DIR = ""}}
      local ws = h.tempdir()
      assert(os.execute("chmod 755 " .. h.shell_quote(ws)))
      local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = ws}
      assert.equal("namespaces", sb.capabilities.isolation)
      local r = sh(sb, "id -u; echo $$; echo x > /tmp/x && cat /tmp/x; touch /usr/x 2>&1 || true")
      assert.matches("^65534\n2\nx\n.*Read%-only file system", r.stdout)
      local marker = "sleep 3" .. tostring(math.random(10000, 99999))
      sb:spawn{"sh", "-c", marker .. " & wait"}
      assert.is_true(h.wait_until(function() return host_procs(marker) ~= "" end))
      sb:close()
      assert.equal("", host_procs(marker))
    end)
  end)
end)
