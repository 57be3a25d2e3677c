-- The scenario assertions, against real commands run by the bundled
-- provider: what they accept, and what their failure messages say.
local core = require "smol.core"
local fs = require "smol.fs"
local testing = require "smol.testing"

local function failure_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "the assertion should have failed")
  return tostring(err)
end

local workspace = fs.temp_dir("smolwf-assert-spec")

describe("scenario assertions", function()
  local sb = testing.sandbox{profile = "local/default", workspace = workspace,
    files = {["notes/todo.txt"] = "buy milk\nwrite specs\n"}}
  teardown(function() testing.remove_tree(workspace) end)

  it("exec_ok passes on exit 0", function()
    assert.exec_ok(sb:exec{"true"})
  end)

  it("exec_ok shows the command, the exit code and the stderr tail", function()
    local r = sb:exec{"sh", "-c", "for i in $(seq 1 15); do echo err$i >&2; done; exit 3"}
    local msg = failure_of(assert.exec_ok, r)
    assert.matches("Expected command to succeed:", msg, 1, true)
    assert.matches("sh -c 'for i in $(seq 1 15); do echo err$i >&2; done; exit 3'", msg, 1, true)
    assert.matches("exit code 3", msg, 1, true)
    assert.matches("(5 earlier lines)", msg, 1, true)
    assert.matches("| err6\n", msg, 1, true)
    assert.matches("| err15", msg, 1, true)
    assert.not_matches("| err5\n", msg, 1, true)
  end)

  it("shows the command of results from plain sessions too (r.argv), not only the fixture's", function()
    local sandbox = require "smol.sandbox"
    local plain = sandbox.open{profile = "local/default", workspace = workspace}
    local host = sandbox.host{cwd = workspace}
    finally(function() plain:close(); host:close() end)
    for _, session in ipairs{plain, host} do
      local r = session:exec{"sh", "-c", "exit 4"}
      assert.same({"sh", "-c", "exit 4"}, r.argv)
      assert.matches("  sh -c 'exit 4'\n  exit code 4", failure_of(assert.exec_ok, r), 1, true)
      if session == host or session.capabilities.process then
        local p = session:spawn{"sh", "-c", "exit 5"}
        local w = p:wait()
        assert.same({"sh", "-c", "exit 5"}, w.argv)
        assert.matches("sh -c 'exit 5'", failure_of(assert.exec_ok, w), 1, true)
      end
    end
  end)

  it("exec_ok names the signal of a killed command", function()
    local r = sb:exec{"sh", "-c", "kill -KILL $$"}
    local msg = failure_of(assert.exec_ok, r)
    assert.matches("exit code 137", msg, 1, true)
    if sb.capabilities.signal then assert.matches("(signal KILL)", msg, 1, true) end
  end)

  it("is_not.exec_ok inverts, with its own message", function()
    assert.is_not.exec_ok(sb:exec{"false"})
    local msg = failure_of(assert.is_not.exec_ok, sb:exec{"true"})
    assert.matches("Expected command to fail, but it succeeded:\n  true\n  exit code 0", msg, 1, true)
  end)

  it("exit_code compares and shows both codes", function()
    local r = sb:exec{"sh", "-c", "echo oops >&2; exit 3"}
    assert.exit_code(3, r)
    local msg = failure_of(assert.exit_code, 4, r)
    assert.matches("Expected exit code 4, got exit code 3:", msg, 1, true)
    assert.matches("| oops", msg, 1, true)
    assert.matches("Expected exit code other than 3", failure_of(assert.is_not.exit_code, 3, r), 1, true)
  end)

  it("stdout_matches uses a Lua pattern and shows stdout on failure", function()
    local r = sb:exec{"sh", "-c", "echo version 1.2.3"}
    assert.stdout_matches("version %d+%.%d+", r)
    local msg = failure_of(assert.stdout_matches, "^error", r)
    assert.matches('Expected stdout to match pattern "^error":', msg, 1, true)
    assert.matches("| version 1.2.3", msg, 1, true)
  end)

  it("file_exists and file_contains read the sandbox", function()
    assert.file_exists(sb, "notes/todo.txt")
    assert.file_exists(sb, "notes")
    assert.is_not.file_exists(sb, "notes/missing.txt")
    assert.file_contains(sb, "notes/todo.txt", "write specs")
    local msg = failure_of(assert.file_exists, sb, "nope.txt")
    assert.matches("Expected `nope.txt` to exist in the sandbox (session " .. sb.id .. ")", msg, 1, true)
    msg = failure_of(assert.file_contains, sb, "notes/todo.txt", "buy bread")
    assert.matches('Expected `notes/todo.txt` to contain "buy bread":', msg, 1, true)
    assert.matches("| buy milk", msg, 1, true)
    msg = failure_of(assert.file_contains, sb, "ghost.txt", "x")
    assert.matches("(the file does not exist)", msg, 1, true)
  end)

  it("file_exists does not hide other errors as a missing file", function()
    local msg = failure_of(assert.file_exists, sb, "../../etc/passwd")
    assert.matches("permission_denied", msg, 1, true)
  end)

  it("reports misuse as bad arguments", function()
    assert.matches("an exec result expected, got string", failure_of(assert.exec_ok, "x"), 1, true)
    assert.matches("an integer expected, got string", failure_of(assert.exit_code, "3", {exit_code = 3}), 1, true)
    assert.matches("a Lua pattern expected", failure_of(assert.stdout_matches, 1, {exit_code = 0}), 1, true)
    assert.matches("a path expected, got nil", failure_of(assert.file_exists, sb), 1, true)
  end)
end)
