-- scripts/ssh_provider.lua on loopback, against a real sshd started here on
-- a spare port with keys generated for the test. Skipped, with the reason,
-- where sshd cannot start (not installed, no privilege separation
-- directory, an unprivileged user it cannot log in...).
local core = require "smol.core"
local lfs = require "lfs"
local fs = require "smol.fs"
local task = require "smol.task"
local sandbox = require "smol.sandbox"
local server = require "smol.provider.server"
local testing = require "smol.testing"
local h = dofile("spec/fixtures/helpers.lua")

local SSHD = "/usr/sbin/sshd"
local START_TIMEOUT = 5

local function run(argv)
  return sandbox.host{cwd = "/"}:exec(argv)
end

local write = fs.write_file

local function sshd_config(dir, port)
  return table.concat({
    "Port " .. port, "ListenAddress 127.0.0.1", "HostKey " .. dir .. "/host_key",
    "AuthorizedKeysFile " .. dir .. "/authorized_keys", "PidFile none", "StrictModes no",
    "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
    "PermitRootLogin prohibit-password", "LogLevel VERBOSE", ""}, "\n")
end

-- Starts sshd on `port`; returns the process and its log lines, or nil and
-- why it did not come up (waits for its "Server listening" line, not a sleep).
local function start_sshd(dir, port)
  write(dir .. "/sshd_config", sshd_config(dir, port))
  local log, ready = {}, task.event()
  local proc, err = core.spawn{file = SSHD, args = {SSHD, "-D", "-e", "-f", dir .. "/sshd_config"},
    stderr = "lines", stdout = "ignore",
    on_stderr = function(line)
      if not line then return end
      log[#log + 1] = line
      if line:find("Server listening") then ready:set(true) end
    end,
    on_exit = function() ready:set(false) end}
  if not proc then return nil, "cannot run " .. SSHD .. ": " .. tostring(err) end
  local timer = core.timer(START_TIMEOUT, function() ready:set(false) end)
  local up = ready:wait()
  timer:stop()
  if up then return proc, log end
  proc:kill("KILL")
  return nil, "sshd did not start: " .. table.concat(log, " / ")
end

local function make_keys(dir)
  for _, name in ipairs{"host_key", "user_key"} do
    local r = run{"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", dir .. "/" .. name}
    if r.exit_code ~= 0 then return nil, "ssh-keygen failed: " .. r.stderr end
  end
  local f = assert(io.open(dir .. "/user_key.pub"))
  write(dir .. "/authorized_keys", f:read("a"))
  f:close()
  return true
end

-- Sets everything up; returns a table or nil and the reason to skip.
local function bring_up(dir)
  if not lfs.attributes(SSHD) then return nil, SSHD .. " is not installed (apt-get install openssh-server)" end
  if not core.bundled_provider() then return nil, "no bundled smolwf-provider next to smolwf" end
  local ok, why = make_keys(dir)
  if not ok then return nil, why end
  local r = run{"id", "-u"}
  if r.stdout == "0\n" and not lfs.attributes("/run/sshd") then
    lfs.mkdir("/run/sshd")   -- sshd's privilege separation directory, as the init script makes it
  end
  local proc, log
  for _ = 1, 5 do   -- a random spare port; another one if it is taken
    local port = math.random(20000, 60000)
    proc, log = start_sshd(dir, port)
    if proc then return {proc = proc, log = log, port = port} end
  end
  return nil, log
end

local function ssh_options(env, port)
  return {"-p", tostring(port), "-i", env.dir .. "/user_key", "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"}
end

local function ssh_program(env, port)
  return server.program("scripts/ssh_provider.lua", "127.0.0.1",
    "--remote=" .. core.bundled_provider(), table.unpack(ssh_options(env, port)))
end

-- Whether a user can log in to this sshd (nologin shells, odd setups).
local function can_login(env)
  local argv = {"ssh", "-o", "BatchMode=yes", table.unpack(ssh_options(env, env.sshd.port))}
  argv[#argv + 1] = "127.0.0.1"
  argv[#argv + 1] = "true"
  local r = run(argv)
  return r.exit_code == 0, r.stderr
end

local function parent_of(pid)
  local stat = fs.try_read_file("/proc/" .. pid .. "/stat")
  return stat and stat:match("^%d+ %b() %S+ (%d+)")   -- the name in parentheses may hold spaces
end

local function descends_from(pid, ancestor)
  local p = pid
  for _ = 1, 64 do
    p = parent_of(p)
    if not p or p == "0" then return false end
    if p == ancestor then return true end
  end
  return false
end

local function is_provider(pid)
  return fs.try_read_file("/proc/" .. pid .. "/cmdline") == core.bundled_provider() .. "\0serve\0"
end

-- Bundled providers started under this test's sshd (other spec files may run
-- their own providers at the same time: ctest runs files side by side).
local function provider_pids(sshd_pid)
  local pids = {}
  for pid in lfs.dir("/proc") do
    if pid:match("^%d+$") and is_provider(pid) and descends_from(pid, sshd_pid) then
      pids[pid] = true
    end
  end
  return pids
end

describe("the SSH forwarding provider (scripts/ssh_provider.lua)", function()
  local env = {dir = fs.temp_dir("smolwf-ssh-spec")}
  local sshd, why = bring_up(env.dir)
  local login_ok, login_err = false, nil
  if sshd then
    env.sshd = sshd
    login_ok, login_err = can_login(env)
    why = "cannot log in to the test sshd: " .. tostring(login_err)
  end
  teardown(function()
    if env.sshd then
      env.sshd.proc:kill("TERM")
      env.sshd.proc:close()
    end
    testing.remove_tree(env.dir)
  end)

  if not (sshd and login_ok) then
    pending("skipped: " .. tostring(why))
    return
  end

  local ws = env.dir .. "/workspace"
  assert(lfs.mkdir(ws))
  write(ws .. "/hello.txt", "hello over ssh\n")

  it("runs commands and file operations on the other side", function()
    local program = ssh_program(env, sshd.port)
    finally(function() sandbox.shutdown(program) end)
    local sshd_pid = tostring(env.sshd.proc.pid)
    local before = provider_pids(sshd_pid)
    local sb = sandbox.open{program = program, profile = "local/default", workspace = ws}
    local r = sb:exec{"sh", "-c", "cat hello.txt; echo $PPID >&2"}
    assert.exec_ok(r)
    assert.same("hello over ssh\n", r.stdout)
    sb:create_dir_all("bin")
    sb:write_file("bin/blob", "\0\1\255")
    assert.same("\0\1\255", sb:read_file("bin/blob"))
    local ok, err = pcall(sb.read_file, sb, "missing.txt")
    assert.is_false(ok)
    assert.same("not_found", err.code)
    assert.matches("Accepted publickey", table.concat(sshd.log, "\n"), 1, true)
    -- the remote provider is a new process started by sshd, not by us
    local remote = {}
    for pid in pairs(provider_pids(sshd_pid)) do
      if not before[pid] then remote[#remote + 1] = pid end
    end
    assert.same(1, #remote)
    sb:close()
    sandbox.shutdown(program)
    -- nothing left: the remote provider goes away with the connection
    assert.is_true(h.wait_until(function() return not is_provider(remote[1]) end),
      "the remote provider outlived the session")
  end)

  it("turns a lost connection into io_error naming the destination", function()
    local program = ssh_program(env, 1)   -- nothing listens on port 1
    local ok, err = pcall(sandbox.open, {program = program, profile = "local/default", workspace = ws})
    sandbox.shutdown(program)
    assert.is_false(ok)
    assert.same("io_error", err.code)
    assert.matches("open via ssh to 127.0.0.1", tostring(err), 1, true)
  end)
end)
