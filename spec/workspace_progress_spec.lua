-- A long sandbox open as the workflow's progress view shows it
-- (smol.workflow.progress: step_progress): the step's line says how far
-- the workspace copy is, in the live view and as a plain line.
local progress = require "smol.workflow.progress"
local helpers = dofile("spec/fixtures/report_helpers.lua")

local EV = {type = "progress", session = "s3", phase = "copy", files = 1200, bytes = 35200000}

describe("the progress view during a long sandbox open", function()
  it("prints a plain line naming the step, the files and the bytes", function()
    local out = helpers.sink()
    local view = progress.new({out = out, live = false})
    local inst = {id = "build"}
    view:step_started(nil, inst, 1)
    view:step_progress(nil, inst, EV)
    assert.matches("%[build%] opening the sandbox %(copy%): 1200 files, 35%.2 MB\n$", out:text())
  end)

  it("shows it as the step's line in the live view", function()
    local out = helpers.sink()
    local view = progress.new({out = out, live = true, color = false, width = 100})
    local ticks = {}
    view.new_timer = function(_, fn) ticks[#ticks + 1] = fn; return {stop = function() end} end
    local inst = {id = "build", started_at = view.clock()}
    view:run_started({})
    view:step_started(nil, inst, 1)
    view:step_progress(nil, inst, EV)
    ticks[#ticks]()
    assert.matches("opening the sandbox %(copy%): 1200 files, 35%.2 MB", out:text())
  end)
end)
