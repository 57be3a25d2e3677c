-- smol.errors: the structured error value and its wording.
local errors = require "smol.errors"

describe("smol.errors", function()
  it("reads like the original engine's context chain", function()
    local e = errors.new{code = "not_found", message = "no such file", op = "read_file", path = "dir/a.bin"}
    assert.equal("failed to read sandbox file `dir/a.bin`: not_found: no such file", tostring(e))
    assert.same({"not_found", "no such file", "read_file", "dir/a.bin"}, {e.code, e.message, e.op, e.path})
  end)

  it("words every file operation as the original does", function()
    local cases = {
      {"create_dir_all", "x/y", "failed to create sandbox directory `x/y`"},
      {"write_file", "f", "failed to write sandbox file `f`"},
      {"remove", "x", "failed to remove sandbox path `x`"},
      {"create_temp_dir", nil, "failed to create sandbox temp directory"},
    }
    for _, c in ipairs(cases) do
      local e = errors.new{code = "io_error", message = "m", op = c[1], path = c[2]}
      assert.equal(c[3] .. ": io_error: m", tostring(e))
    end
  end)

  it("has no context when no operation is known", function()
    assert.equal("protocol: bad line", tostring(errors.new{code = "protocol", message = "bad line"}))
  end)

  it("names an operation it has no wording for", function()
    assert.equal("sandbox frobnicate failed: internal: x",
      tostring(errors.new{code = "internal", message = "x", op = "frobnicate"}))
  end)

  it("defaults the message to the code and requires a code", function()
    assert.equal("timeout", errors.new{code = "timeout"}.message)
    assert.has_error(function() errors.new{message = "no code"} end)
  end)

  it("raises the value itself, with no position prepended", function()
    local ok, e = pcall(errors.raise, {code = "unsupported", message = "m", op = "stat", path = "p"})
    assert.is_false(ok)
    assert.is_true(errors.is(e))
    assert.is_true(errors.is(e, "unsupported"))
    assert.is_false(errors.is(e, "not_found"))
    assert.is_false(errors.is({code = "unsupported"}))
    assert.is_false(errors.is("unsupported"))
  end)

  it("adds context to a copy, and only where none is set", function()
    local bare = errors.new{code = "provider_exited", message = "gone", program = "p"}
    local e = errors.with_context(bare, "write_file", "a")
    assert.equal("failed to write sandbox file `a`: provider_exited: gone", tostring(e))
    assert.equal("p", e.program)
    assert.is_nil(bare.op)
    assert.equal(e, errors.with_context(e, "read_file", "b"))
    local labelled = errors.with_context(bare, "open", "/a/long/build/dir/smolwf-provider", "smolwf-provider")
    assert.equal("failed to open sandbox session with provider `smolwf-provider`: provider_exited: gone",
      tostring(labelled))
    assert.same({"/a/long/build/dir/smolwf-provider", "smolwf-provider"}, {labelled.path, labelled.label})
    local cancelled = {code = "cancelled"}
    assert.equal(cancelled, errors.with_context(cancelled, "exec", "sh"))
  end)
end)
