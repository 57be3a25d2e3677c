-- Housekeeping: .smolwf/runs keeps the last N runs (--keep-runs, default
-- 20), step logs keep their tail under a cap (--log-cap) and the report
-- says how much was dropped, and --profile overrides the workflow's.
local cjson = require "cjson"
local lfs = require "lfs"
local fs = require "smol.fs"
local h = require "spec.workflow_helpers"

local function project(workflow)
  local dir = h.temp_dir()
  fs.mkdir_p(dir)
  fs.write_file(dir .. "/wf.lua", workflow)
  return dir
end

local function runs_in(dir)
  local names = {}
  for name in lfs.dir(dir .. "/.smolwf/runs") do
    if name:sub(1, 1) ~= "." then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

local QUICK = [[return require("smol.workflow").define{name = "quick", steps = {{name = "a", run = function() end}}}]]

describe("workflow housekeeping", function()
  after_each(h.cleanup)

  it("keeps the last N runs in .smolwf/runs (20 by default)", function()
    local dir = project(QUICK)
    fs.mkdir_p(dir .. "/.smolwf/runs/not-a-run")
    for i = 1, 22 do fs.mkdir_p(("%s/.smolwf/runs/20200101-0000%02d"):format(dir, i)) end
    local r = h.smolwf({ "run", "--no-progress", "wf.lua" }, { cwd = dir })
    assert.are.equal(0, r.code, r.stderr)
    local names = runs_in(dir)
    assert.are.equal(21, #names, "20 runs and the directory that is not one")
    assert.are.equal("20200101-000004", names[1])
    assert.are.equal("not-a-run", names[#names])
    r = h.smolwf({ "run", "--no-progress", "--keep-runs", "2", "wf.lua" }, { cwd = dir })
    assert.are.equal(0, r.code, r.stderr)
    names = runs_in(dir)
    assert.are.equal(3, #names)
    assert.matches("^%d+%-%d+", names[1])
    assert.are.equal(r.stdout:match("report: %.smolwf/runs/([^\n]+)"), names[2])
  end)

  it("keeps the tail of a step log over --log-cap and says how much it dropped", function()
    local dir = project([[return require("smol.workflow").define{name = "flood",
      sandbox = {profile = "local/default"},
      steps = {{name = "flood", run = function(ctx) ctx:sh("seq 1 100000; echo the-end") end}}}]])
    local r = h.smolwf({ "run", "--no-progress", "--report-dir", dir .. "/r", "--log-cap", "64K", "wf.lua" }, { cwd = dir })
    assert.are.equal(0, r.code, r.stderr)
    local log = h.read(dir .. "/r/logs/flood.stdout.log")
    local total = #table.concat((function() local t = {} for i = 1, 100000 do t[i] = i .. "\n" end return t end)()) + #"the-end\n"
    local dropped = tonumber(log:match("^%[smolwf: the first (%d+) bytes of this log were dropped; it keeps the last 65536%]\n"))
    assert.are.equal(total - 65536, dropped)
    assert.are.equal(65536, #log - #log:match("^[^\n]*\n"))
    assert.matches("99999\n100000\nthe%-end\n$", log)
    local report = cjson.decode((h.read(dir .. "/r/report.json")))
    assert.are.same({ stdout = dropped }, report.instances[1].logs_dropped)
    assert.truthy(h.read(dir .. "/r/report.html"):find("the log dropped the first", 1, true))
  end)

  it("runs every session with the profile --profile names", function()
    local dir = project([[return require("smol.workflow").define{name = "p",
      sandbox = {profile = "nosuch/profile"},
      steps = {{name = "a", run = function(ctx) ctx:sh("true") end},
               {name = "b", sandbox = {profile = "nosuch/other"}, run = function(ctx) ctx:sh("true") end}}}]])
    local r = h.smolwf({ "run", "--no-progress", "--report-dir", dir .. "/r", "wf.lua" }, { cwd = dir })
    assert.are.equal(1, r.code)
    r = h.smolwf({ "run", "--no-progress", "--report-dir", dir .. "/r", "--profile", "local/default", "wf.lua" }, { cwd = dir })
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    local report = cjson.decode((h.read(dir .. "/r/report.json")))
    assert.are.equal("local/default", report.sandbox.profile)
    assert.are.equal("local/default", report.instances[2].sandbox.profile)
  end)
end)
