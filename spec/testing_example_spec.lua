-- The scenario spec shown in "Testing with smol-workflow" (README): a small
-- C program built and checked inside a sandbox.
local testing = require "smol.testing"

describe("greeter", function()
  -- A fresh session (and a fresh copy of the workspace) for every test,
  -- closed after it; the fixture checks nothing was left running.
  local sb = testing.sandbox{
    profile = "local/default",               -- or "auto/default": bwrap where it works
    workspace = "spec/fixtures/greeter",      -- copied into the session
    fresh = true,
  }

  before_each(function()
    assert.exec_ok(sb:exec{"cc", "-o", "greeter", "greeter.c"})
  end)

  it("greets", function()
    local r = sb:exec{"./greeter", "world"}
    assert.exec_ok(r)
    assert.stdout_matches("^Hello, world!", r)
    testing.golden("greeter/hello.txt", r.stdout)    -- spec/golden/greeter/hello.txt
    assert.file_contains(sb, "greeting.log", "greeted world")
  end)

  it("needs a name", function()
    local r = sb:exec{"./greeter"}
    assert.exit_code(2, r)
    assert.matches("usage: greeter NAME", r.stderr, 1, true)
    assert.is_not.file_exists(sb, "greeting.log")
  end)
end)
