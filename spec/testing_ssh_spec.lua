-- scripts/ssh_provider.lua on loopback, against a real sshd started here on
-- a spare port with keys generated for the test. Skipped, with the reason,
-- where sshd cannot start (not installed, no privilege separation
-- directory, an unprivileged user it cannot log in...).
local core = require "smol.core"
local lfs = require "lfs"
local fs = require "smol.fs"
local sandbox = require "smol.sandbox"
local server = require "smol.provider.server"
local h = dofile("spec/fixtures/helpers.lua")

local sshd_fixture = dofile("spec/fixtures/sshd.lua")
local write = fs.write_file

local function ssh_program(env, port)
  return server.program("scripts/ssh_provider.lua", "127.0.0.1",
    "--remote=" .. core.bundled_provider(), table.unpack(sshd_fixture.options(env, port)))
end

describe("the SSH forwarding provider (scripts/ssh_provider.lua)", function()
  local env, why, made = sshd_fixture.up()
  local sshd = env and env.sshd
  teardown(function() sshd_fixture.down(env or made) end)

  if not sshd then
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
    local before = sshd_fixture.provider_pids(sshd_pid)
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
    for pid in pairs(sshd_fixture.provider_pids(sshd_pid)) do
      if not before[pid] then remote[#remote + 1] = pid end
    end
    assert.same(1, #remote)
    sb:close()
    sandbox.shutdown(program)
    -- nothing left: the remote provider goes away with the connection
    assert.is_true(h.wait_until(function() return not sshd_fixture.is_provider(remote[1]) end),
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
