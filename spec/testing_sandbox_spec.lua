-- testing.sandbox: a session fixture per describe block (or per test), that
-- leaves nothing behind.
local core = require "smol.core"
local lfs = require "lfs"
local sandbox = require "smol.sandbox"
local testing = require "smol.testing"

local workspace = assert(core.mkdtemp("/tmp/smolwf-fixture-spec-XXXXXX"))
local f = assert(io.open(workspace .. "/seed.txt", "w"))
f:write("seed\n")
f:close()

local shared_sessions, fresh_sessions = {}, {}
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
    sb:spawn{"sleep", "300"}
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
      assert.is_truthy(s._closed, tostring(s) .. " is still open")
      assert.has_error(function() s:exec{"true"} end)
      assert.is_nil(lfs.attributes(s.cwd), s.cwd .. " still exists")
    end
  end)

  it("no `sleep 300` from the shared session survives", function()
    for pid in lfs.dir("/proc") do
      local cmd = pid:match("^%d+$") and io.open("/proc/" .. pid .. "/cmdline")
      if cmd then
        local line = cmd:read("a") or ""
        cmd:close()
        assert.is_not.equal("sleep\0" .. "300\0", line, "process " .. pid .. " survived")
      end
    end
  end)
end)

describe("the leak check", function()
  local dir
  before_each(function() dir = assert(core.mkdtemp("/tmp/smolwf-leak-spec-XXXXXX")) end)
  after_each(function() testing.remove_tree(dir) end)

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

  it("cannot look into namespaced sessions and says nothing about them", function()
    assert.has_no.errors(function()
      testing.check_no_leaks({id = "s3", cwd = "/workspace", capabilities = {isolation = "namespaces"}})
    end)
  end)
end)

describe("testing.sandbox misuse", function()
  it("names an unknown option", function()
    local ok, err = pcall(testing.sandbox, {profil = "local/default"})
    assert.is_false(ok)
    assert.matches("unknown option `profil`", err, 1, true)
  end)
end)
