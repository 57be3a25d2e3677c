-- The waits in spec/fixtures/helpers.lua, which every client spec's
-- after_each relies on: condition-based, patient, and cheap while waiting
-- (CI runs two spec files at once on two cores; a wait that spins steals
-- the CPU the other file needs).
local core = require "smol.core"
local h = dofile("spec/fixtures/helpers.lua")

describe("spec helpers", function()
  -- a process whose handle closes only when it exits, 0.5 s from now
  local function sleeper()
    local p
    p = assert(core.spawn{file = "sleep", args = {"sleep", "0.5"}, on_exit = function() p:close() end})
    return p
  end

  it("handles_back_to waits for a late close without spinning the CPU", function()
    local baseline = core.open_handles()
    sleeper()
    assert.is_true(core.open_handles() > baseline)
    local t0, cpu0 = core.now(), os.clock()
    assert.is_true(h.handles_back_to(baseline))
    assert.is_true(core.now() - t0 >= 0.3, "returned before the process exited")
    assert.is_true(os.clock() - cpu0 < 0.2, ("spent %.2f s of CPU waiting"):format(os.clock() - cpu0))
  end)

  it("handles_back_to gives up at its timeout, and defaults to a generous one", function()
    local baseline = core.open_handles()
    sleeper()
    assert.is_false(h.handles_back_to(baseline, 0.05))
    assert.is_true(h.handles_back_to(baseline))
    assert.is_true(h.WAIT >= 30)
  end)

  it("wait_until returns as soon as the condition holds", function()
    local t0 = core.now()
    assert.is_true(h.wait_until(function() return core.now() - t0 > 0.05 end))
    assert.is_true(core.now() - t0 < 5)
    assert.is_false(h.wait_until(function() return false end, 0.05))
  end)
end)
