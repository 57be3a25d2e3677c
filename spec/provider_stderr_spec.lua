-- A provider's own explanation (its last stderr lines) travels in the
-- error of its end, and so into a workflow's report; it is not printed
-- raw into the middle of the run's output.
local sandbox = require "smol.sandbox"
local jsonl = require "smol.jsonl"
local errors = require "smol.errors"
local cjson = require "cjson"
local h = dofile("spec/fixtures/helpers.lua")
local wh = dofile("spec/workflow_helpers.lua")

local FAULT = h.fixture("fault_provider.lua")

describe("a provider's stderr", function()
  after_each(function()
    sandbox.shutdown()
    h.cleanup()
  end)

  it("ends the message and fills the stderr field of its exit's error", function()
    local conn = jsonl.start(FAULT)
    local ok, e = conn:try_request("exec", cjson.encode{argv = {"stderr", "first words"}})
    assert.is_true(ok, tostring(e))
    ok, e = conn:try_request("exec", cjson.encode{argv = {"crash", "4"}})
    assert.is_false(ok)
    assert.is_true(errors.is(e, "provider_exited"), tostring(e))
    assert.equal("first words", e.stderr)
    assert.matches("exited with status 4; its stderr ends: first words$", e.message)
  end)

  it("keeps its last lines only, each cut", function()
    local conn = jsonl.start(FAULT)
    for i = 1, 15 do conn:try_request("exec", cjson.encode{argv = {"stderr", "line " .. i}}) end
    conn:try_request("exec", cjson.encode{argv = {"stderr", ("x"):rep(1000)}})
    local ok, e = conn:try_request("exec", cjson.encode{argv = {"crash"}})
    assert.is_false(ok)
    local lines = {}
    for line in (e.stderr .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
    assert.equal(10, #lines)
    assert.equal("line 7", lines[1])
    assert.equal(("x"):rep(400) .. "...", lines[10])
    assert.matches("its stderr ends: line 14 / line 15 / x+%.%.%.$", e.message)
  end)

  it("of a provider that fails to start goes into the workflow's report, not the live output", function()
    local dir = h.tempdir()
    local profiles = dir .. "/profiles.json"
    local f = assert(io.open(profiles, "w"))
    f:write("garbage[[\n")
    f:close()
    local report = dir .. "/out"
    local r = wh.smolwf({"run", "--report-dir", report, "spec/fixtures/workflows/local_one.lua"},
      {env = {PATH = os.getenv("PATH"), HOME = os.getenv("HOME"), SMOLWF_PROFILES = profiles}})
    assert.equal(1, r.code)
    local output = r.stdout .. r.stderr
    local explanation = "profiles file " .. profiles .. ": invalid JSON"
    assert.is_nil(output:find("[smolwf-provider]", 1, true), output)
    -- on the failed step's line, after the provider's exit
    assert.is_truthy(output:find("exited with status 1; its stderr ends: smolwf-provider: " .. explanation, 1, true), output)
    local json = assert(io.open(report .. "/report.json")):read("a")
    local escaped = explanation:gsub("/", "\\/")   -- as lua-cjson writes a "/"
    assert.is_truthy(json:find(explanation, 1, true) or json:find(escaped, 1, true),
      "report.json lacks the explanation")
  end)
end)
