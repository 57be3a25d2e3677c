-- testing.golden: golden files with a unified diff on mismatch.
local core = require "smol.core"
local fs = require "smol.fs"
local testing = require "smol.testing"
local golden = require "smol.testing.golden"

local read, write = fs.try_read_file, fs.write_file

local function failure_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected a failure")
  return tostring(err)
end

describe("testing.golden", function()
  local dir, saved_dir, saved_update
  before_each(function()
    dir = fs.temp_dir("smolwf-golden-spec")
    saved_dir, saved_update = golden.dir, golden.update
    golden.dir, golden.update = dir, false
  end)
  after_each(function()
    golden.dir, golden.update = saved_dir, saved_update
    testing.remove_tree(dir)
  end)

  it("passes when the file holds exactly the actual text", function()
    write(dir .. "/same.txt", "one\ntwo\n")
    assert.is_true(testing.golden("same.txt", "one\ntwo\n"))
  end)

  it("fails on a mismatch with a unified diff and how to accept it", function()
    write(dir .. "/out.txt", "alpha\nbeta\ngamma\n")
    local msg = failure_of(testing.golden, "out.txt", "alpha\nBETA\ngamma\n")
    assert.matches("golden file `" .. dir .. "/out.txt` differs", msg, 1, true)
    assert.matches("smolwf test --update-golden", msg, 1, true)
    assert.matches("--- " .. dir .. "/out.txt\n+++ actual\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma", msg, 1, true)
  end)

  it("shows a missing final newline in the diff", function()
    write(dir .. "/nl.txt", "x\n")
    local msg = failure_of(testing.golden, "nl.txt", "x")
    assert.matches("No newline at end of file", msg, 1, true)
  end)

  it("fails when the golden file does not exist, naming it", function()
    local msg = failure_of(testing.golden, "new.txt", "x")
    assert.matches("golden file `" .. dir .. "/new.txt` does not exist", msg, 1, true)
    assert.is_nil(read(dir .. "/new.txt"))
  end)

  it("in update mode writes the actual text, creating directories", function()
    write(dir .. "/old.txt", "old\n")
    golden.update = true
    assert.is_true(testing.golden("old.txt", "new\n"))
    assert.is_true(testing.golden("sub/dir/fresh.txt", "fresh\n"))
    assert.same("new\n", read(dir .. "/old.txt"))
    assert.same("fresh\n", read(dir .. "/sub/dir/fresh.txt"))
    golden.update = false
    assert.is_true(testing.golden("sub/dir/fresh.txt", "fresh\n"))
  end)

  it("keeps binary content exact", function()
    golden.update = true
    testing.golden("bytes.bin", "\0\1\255")
    assert.same("\0\1\255", read(dir .. "/bytes.bin"))
  end)

  it("counts a mismatch as a failure of the test, not an error, at the test's line", function()
    write(dir .. "/g.txt", "expected\n")
    local spec = dir .. "/mismatch_spec.lua"
    write(spec, ('local golden = require "smol.testing.golden"\ngolden.dir = %q\n'
      .. 'it("differs", function()\n  require("smol.testing").golden("g.txt", "actual\\n")\nend)\n')
      :format(dir))
    local r = require("smol.sandbox").host{}:exec{core.exe_path(), "test", "-o", "plainTerminal", spec}
    assert.matches("0 successes / 1 failure / 0 errors / 0 pending", r.stdout)
    assert.matches("\nFailure %-> [^\n]*mismatch_spec%.lua @ 3\ndiffers\n[^\n]*mismatch_spec%.lua:4: golden file", r.stdout)
  end)

  it("refuses names that leave the golden directory and bad arguments", function()
    assert.matches("must stay inside", failure_of(testing.golden, "../escape.txt", "x"))
    assert.matches("must stay inside", failure_of(testing.golden, "/etc/passwd", "x"))
    assert.matches("a string expected, got number", failure_of(testing.golden, "n.txt", 42))
    assert.matches("a file name expected", failure_of(testing.golden, nil, "x"))
  end)
end)

describe("testing.golden on a real command's output", function()
  it("matches spec/golden/testing_greeting.txt", function()
    local host = require("smol.sandbox").host{cwd = "."}
    local r = host:exec{"printf", "%s\\n", "hello from smolwf", "second line"}
    assert.exec_ok(r)
    testing.golden("testing_greeting.txt", r.stdout)
  end)
end)
