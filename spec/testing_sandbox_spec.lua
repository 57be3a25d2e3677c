-- testing.sandbox: a session fixture per describe block (or per test), that
-- leaves nothing behind.
local core = require "smol.core"
local fs = require "smol.fs"
local lfs = require "lfs"
local sandbox = require "smol.sandbox"
local testing = require "smol.testing"

local workspace = fs.temp_dir("smolwf-fixture-spec")
local f = assert(io.open(workspace .. "/seed.txt", "w"))
f:write("seed\n")
f:close()

local shared_sessions, fresh_sessions = {}, {}
-- A duration no other process on this machine uses, to recognise ours.
local SLEEP = ("%d.%06d"):format(300, math.random(0, 999999))
local early_error

describe("a shared fixture", function()
  local sb = testing.sandbox{profile = "local/default", workspace = workspace,
    files = {["made/by/files.txt"] = "from files"}}
  early_error = select(2, pcall(function() return sb.id end))

  it("opens before the first test with the workspace and the files", function()
    shared_sessions[#shared_sessions + 1] = testing.session_of(sb)
    assert.file_contains(sb, "seed.txt", "seed")
    assert.file_contains(sb, "made/by/files.txt", "from files")
    sb:write_file("left-by-test-1.txt", "1")
    -- a process still running when the block ends must be killed by close
    sb:spawn{"sleep", SLEEP}
  end)

  it("is the same session in the next test", function()
    shared_sessions[#shared_sessions + 1] = testing.session_of(sb)
    assert.equal(shared_sessions[1], shared_sessions[2])
    assert.file_exists(sb, "left-by-test-1.txt")
  end)
end)

describe("a fresh fixture", function()
  local sb = testing.sandbox{profile = "local/default", workspace = workspace, fresh = true}

  it("gives the first test its own session", function()
    fresh_sessions[#fresh_sessions + 1] = testing.session_of(sb)
    sb:write_file("mine.txt", "first")
  end)

  it("gives the next test a new session and a fresh workspace", function()
    fresh_sessions[#fresh_sessions + 1] = testing.session_of(sb)
    assert.are_not.equal(fresh_sessions[1], fresh_sessions[2])
    assert.is_not.file_exists(sb, "mine.txt")
    assert.file_exists(sb, "seed.txt")
  end)
end)

describe("after the fixtures' blocks", function()
  teardown(function() testing.remove_tree(workspace) end)

  it("the proxy refused use before the block's tests", function()
    assert.matches("used while no session is open", tostring(early_error), 1, true)
  end)

  it("every session was closed, with no directory or process left", function()
    local all = {shared_sessions[1], fresh_sessions[1], fresh_sessions[2]}
    for _, s in ipairs(all) do
      assert.is_true(s:is_closed(), tostring(s) .. " is still open")
      assert.has_error(function() s:exec{"true"} end)
      assert.is_nil(lfs.attributes(s.cwd), s.cwd .. " still exists")
    end
  end)

  it("the `sleep` spawned in the shared session did not survive", function()
    for pid in lfs.dir("/proc") do
      local cmd = pid:match("^%d+$") and io.open("/proc/" .. pid .. "/cmdline")
      if cmd then
        local line = cmd:read("a") or ""
        cmd:close()
        assert.is_not.equal("sleep\0" .. SLEEP .. "\0", line, "process " .. pid .. " survived")
      end
    end
  end)
end)

describe("the leak check", function()
  local dir, saved_grace
  before_each(function()
    dir = fs.temp_dir("smolwf-leak-spec")
    saved_grace, testing.leak_grace = testing.leak_grace, 0.2   -- these processes are meant to stay
  end)
  after_each(function()
    testing.leak_grace = saved_grace
    testing.remove_tree(dir)
  end)

  it("fails when a closed session's directory is still there", function()
    local session = {id = "s1", cwd = dir, capabilities = {isolation = "none"}}
    local ok, err = pcall(testing.check_no_leaks, session)
    assert.is_false(ok)
    assert.matches("sandbox session s1 left its directory " .. dir .. " behind after close", err, 1, true)
  end)

  it("fails when a process still runs in it", function()
    local host = sandbox.host{cwd = dir}
    local p = host:spawn{"sleep", "30"}
    finally(function() p:kill("KILL"); p:wait() end)
    local ok, err = pcall(testing.check_no_leaks, {id = "s2", cwd = dir, capabilities = {isolation = "none"}})
    assert.is_false(ok)
    assert.matches("sandbox session s2 leaked processes after close", err, 1, true)
  end)

  it("finds a process whose directory was already removed", function()
    local host = sandbox.host{cwd = dir}
    local p = host:spawn{"sleep", "30"}
    finally(function() p:kill("KILL"); p:wait() end)
    testing.remove_tree(dir)
    local ok, err = pcall(testing.check_no_leaks, {id = "s4", cwd = dir, capabilities = {isolation = "none"}})
    assert.is_false(ok)
    assert.matches("sandbox session s4 leaked processes after close", err, 1, true)
  end)

  it("cannot look into namespaced sessions and says nothing about them", function()
    assert.has_no.errors(function()
      testing.check_no_leaks({id = "s3", cwd = "/workspace", capabilities = {isolation = "namespaces"}})
    end)
  end)
end)

describe("testing.sandbox misuse", function()
  it("refuses to work outside busted", function()
    local r = sandbox.host{cwd = "."}:exec{core.exe_path(), "-e", "require('smol.testing').sandbox{}"}
    assert.is_not.exec_ok(r)
    assert.matches("testing.sandbox must be called inside a busted describe block", r.stderr, 1, true)
  end)

  it("names an unknown option", function()
    local ok, err = pcall(testing.sandbox, {profil = "local/default"})
    assert.is_false(ok)
    assert.matches("unknown option `profil`", err, 1, true)
  end)
end)

describe("a fixture with sandbox.open's own open_timeout", function()
  local sb = testing.sandbox{profile = "local/default", open_timeout = 30}

  it("opens its session with it", function()
    assert.is_true(sb:exec{"true"}.ok)
  end)
end)

describe("the fixture's spawned processes", function()
  local sb = testing.sandbox{profile = "local/default", workspace = "spec/fixtures/greeter"}

  it("give wait() results that failure messages can name", function()
    local p = sb:spawn{"sh", "-c", "echo nope >&2; exit 4"}
    local r = p:wait()
    local ok, err = pcall(assert.exec_ok, r)
    assert.is_false(ok)
    assert.matches("sh -c 'echo nope >&2; exit 4'\n  exit code 4", err, 1, true)
  end)
end)

describe("a fixture whose files cannot be written", function()
  it("closes the session it opened before failing", function()
    local opened
    local fixture = testing._new_fixture{profile = "local/default", workspace = "spec/fixtures/greeter",
      files = {["greeter.c/inside-a-file"] = "x"},
      open = function(spec) opened = sandbox.open(spec); return opened end}
    local ok, err = pcall(fixture.open, fixture)
    assert.is_false(ok)
    assert.matches("greeter.c", tostring(err), 1, true)
    assert.is_true(opened:is_closed(), "the half-prepared session is still open")
    assert.is_nil(testing.session_of(fixture.proxy))
  end)
end)
