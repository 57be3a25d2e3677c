-- Workspaces from Lua (lua/smol/sandbox.lua, testing.lua): the workspace
-- option as a path or a table, the empty default, sb:fork(), open's
-- progress, and testing.sandbox's setup run once with a fork per test.
local sandbox = require "smol.sandbox"
local testing = require "smol.testing"
local fs = require "smol.fs"
local h = dofile("spec/fixtures/helpers.lua")

local function tree()
  local dir = h.tempdir()
  fs.write_file(dir .. "/a.txt", "host\n")
  fs.write_file(dir .. "/b.o", "object\n")
  return dir
end

describe("sandbox.open's workspace", function()
  after_each(function()
    sandbox.shutdown()
    h.cleanup()
  end)

  it("is empty unless one is named", function()
    local sb = sandbox.open{profile = "local/default"}
    assert.equals("empty", sb.capabilities.workspace)
    assert.same({}, sb:list_dir("."))
  end)

  it("takes a path, or a table with exclude patterns and a mode", function()
    local dir = tree()
    local sb = sandbox.open{profile = "local/default", workspace = {path = dir, exclude = {"*.o"}}}
    assert.equals("copy", sb.workspace.mechanism)
    assert.equals("a.txt", sb:list_dir(".")[1].name)
    assert.equals(1, #sb:list_dir("."))
    local bound = sandbox.open{profile = "local/default", workspace = {path = dir, mode = "bind"}}
    bound:write_file("new", "x")
    assert.equals("x", fs.read_file(dir .. "/new"))
  end)

  it("refuses a bad workspace table at the caller's line", function()
    local ok, err = pcall(sandbox.open, {workspace = {path = ".", mode = "rw"}})
    assert.is_false(ok)
    assert.matches("workspace.mode must be", err)
    ok, err = pcall(sandbox.open, {workspace = {pth = "."}})
    assert.matches("unknown field `pth`", err)
  end)

  it("reports the copy's progress to on_progress when it takes longer than a second", function()
    local dir = h.tempdir()
    for i = 1, 40 do fs.write_file(("%s/f%d"):format(dir, i), "x") end
    local program = h.tempdir() .. "/paced"
    fs.write_file(program, ("#!/bin/sh\nSMOLWF_PROVIDER_COPY_PACE_MS=40 exec %s \"$@\"\n"):format(require("smol.core").bundled_provider()))
    assert(os.execute("chmod 755 " .. program))
    local seen = {}
    local sb = sandbox.open{program = program, profile = "local/default", workspace = dir,
                            on_progress = function(ev) seen[#seen + 1] = ev end}
    assert.is_true(#seen >= 1)
    assert.equals("copy", seen[1].phase)
    assert.is_true(seen[1].files >= 1 and seen[1].files < 40)
    assert.equals(40, sb.workspace.files)
  end)
end)

describe("sb:fork()", function()
  after_each(function()
    sandbox.shutdown()
    h.cleanup()
  end)

  it("gives a new session that starts as a snapshot and then goes its own way", function()
    local dir = tree()
    local sb = sandbox.open{profile = "auto/default", workspace = dir}
    sb:exec{"sh", "-c", "echo built > out; echo t > $TMPDIR/t"}
    local child = sb:fork()
    assert.not_equals(sb.id, child.id)
    assert.equals("built\nt\n", child:exec{"sh", "-c", "cat out $TMPDIR/t"}.stdout)
    child:write_file("out", "child")
    assert.equals("built\n", sb:read_file("out"))
    assert.equals("host\n", fs.read_file(dir .. "/a.txt"))
    child:close()
    sb:close()
    assert.has_error(function() sb:fork() end, "sandbox: fork: attempt to use a closed session")
  end)
end)

describe("testing.sandbox with fresh and setup", function()
  local setups = 0
  local sb = testing.sandbox{
    profile = "auto/default", fresh = true, files = {["seed.txt"] = "seed"},
    setup = function(s)
      setups = setups + 1
      s:exec{"sh", "-c", "cat seed.txt > built; echo built >> built"}
    end,
  }

  it("runs the setup once and gives this test a fork of it", function()
    assert.equals("seedbuilt\n", sb:read_file("built"))
    sb:write_file("built", "changed by the first test")
    assert.equals(1, setups)
  end)

  it("gives the next test its own fork, without the first test's writes", function()
    assert.equals("seedbuilt\n", sb:read_file("built"))
    assert.equals(1, setups)
  end)
end)
