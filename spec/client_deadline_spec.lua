-- The client never trusts the provider for a deadline: an exec's own
-- timeout plus a grace, a default deadline for close, and a provider's
-- exit failing its requests whatever still holds its pipes.
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local errors = require "smol.errors"
local h = dofile("spec/fixtures/helpers.lua")

local FAULT = h.fixture("fault_provider.lua")

describe("client deadlines", function()
  local saved, ws, sb, watchdog
  before_each(function()
    saved = {sandbox.deadline_grace, sandbox.close_timeout}
    sandbox.deadline_grace, sandbox.close_timeout = 0.3, 0.5
    ws = h.tempdir()
    sb = sandbox.open{program = FAULT, profile = "fault/default", workspace = ws}
    -- today's failure mode is a hang: end it, so that the test fails instead
    local conn = sb:connection()
    watchdog = core.timer(15, function() conn:kill("KILL") end)
  end)
  after_each(function()
    watchdog:stop()
    sandbox.deadline_grace, sandbox.close_timeout = saved[1], saved[2]
    pcall(sb.close, sb)
    sandbox.shutdown()
    h.cleanup()
  end)

  it("fail an exec the provider never answers at its timeout plus the grace, and kill it", function()
    local t0 = core.now()
    local e = h.catch(sb.exec, sb, {"hang", timeout = 0.5})
    local took = core.now() - t0
    assert.is_true(errors.is(e, "timeout"), tostring(e))
    assert.matches("did not answer `exec` within 0.8 s", e.message)
    assert.is_true(took >= 0.75 and took < 5, "took " .. took .. " s")
    local kill
    h.wait_until(function()
      for _, r in ipairs(h.requests(ws)) do
        if r.method == "kill" then kill = r.params end
      end
      return kill ~= nil
    end, 5)
    assert.same({"hang_1", "KILL"}, {kill.process_id, kill.signal})
    assert.is_true(sb:connection():alive())   -- one late request does not end the provider
    assert.equal(0, sb:exec{"true"}.exit_code)
  end)

  it("bound close by default", function()
    sb:exec{"deaf"}
    local t0 = core.now()
    local e = h.catch(sb.close, sb)
    assert.is_true(errors.is(e, "timeout"), tostring(e))
    assert.is_true(core.now() - t0 < 5)
    assert.is_true(sb:is_closed())
  end)

  it("fail the pending requests of a provider that exited while a setsid descendant holds its stdout", function()
    local pidfile = ws .. "/orphan.pid"
    local t0 = core.now()
    local e = h.catch(sb.exec, sb, {"orphan", pidfile})
    local took = core.now() - t0
    local pid
    h.wait_until(function()
      local f = io.open(pidfile)
      pid = f and math.tointeger(tonumber(f:read("a")))
      if f then f:close() end
      return pid ~= nil
    end, 5)
    assert.is_true(h.alive(pid), "the descendant holding the pipe is still there")
    core.kill(pid, "KILL")
    assert.is_true(errors.is(e, "provider_exited"), tostring(e))
    assert.matches("exited with status 3", e.message)
    assert.is_true(took < 5, "took " .. took .. " s")
  end)
end)
