-- An event line of many megabytes: its payload is decoded over its own text
-- in the host's line buffer (host/smolwf/conn.c, decode_split), which must
-- give exactly the bytes, and refuse invalid base64 as a short line does.
local sandbox = require "smol.sandbox"
local errors = require "smol.errors"
local h = dofile("spec/fixtures/helpers.lua")

local FAULT = h.fixture("fault_provider.lua")
local GROUPS = 1000000   -- a 4 MB line

describe("a long event line", function()
  local sb
  before_each(function() sb = sandbox.open{program = FAULT, profile = "fault/default", workspace = h.tempdir()} end)
  after_each(function()
    pcall(sb.close, sb)
    sandbox.shutdown()
    h.cleanup()
  end)

  local one = string.rep("\0\1\2", GROUPS) .. "\0\1"

  it("decodes to exactly its bytes, captured", function()
    local r = sb:exec{"huge", tostring(GROUPS)}
    assert.equal(2 * #one, #r.stdout)
    assert.is_true(r.stdout == one .. one)
  end)

  it("decodes to exactly its bytes, for a callback and captured", function()
    local chunks = {}
    local r = sb:exec{"huge", tostring(GROUPS), on_stdout = function(c) chunks[#chunks + 1] = c end}
    assert.equal(2, #chunks)
    assert.is_true(chunks[1] == one and chunks[2] == one)
    assert.is_true(r.stdout == one .. one)
  end)

  it("with invalid base64 fails as a short one does, naming the offset", function()
    local e = h.catch(sb.exec, sb, {"bad_base64", tostring(GROUPS)})
    assert.is_true(errors.is(e, "protocol"), tostring(e))
    assert.matches("sandbox exec event contained invalid base64 data: invalid base64 at offset " .. 4 * GROUPS, e.message)
  end)
end)
