-- `smolwf run --resume [REPORT_DIR]`: re-runs what failed, was cancelled or
-- skipped (and what depends on it), reusing the outputs and the return
-- values of what succeeded; the new report links the run it resumed.
local cjson = require "cjson"
local fs = require "smol.fs"
local h = require "spec.workflow_helpers"

local WORKFLOW = [[
local wf = require "smol.workflow"
return wf.define{name = "resumable", sandbox = {profile = "local/default"},
  secrets = {TOKEN = {env = "SPEC_TOKEN"}},
  steps = {
    {name = "fetch", outputs = {"data.txt"}, run = function(ctx)
      ctx:sh("echo payload > data.txt; echo fetch >> " .. ctx.params.log)
      return {n = 1, f = 2.0}
    end},
    {name = "secret", run = function(ctx) ctx:sh("echo secret >> " .. ctx.params.log); return ctx.secrets.TOKEN end},
    {name = "build", needs = {"fetch"}, run = function(ctx)
      local r = ctx:sh("cat data.txt; echo build >> " .. ctx.params.log)
      if ctx.params.broken == "yes" then error("build broke", 0) end
      return {got = r.stdout, f_type = math.type(ctx.inputs.fetch.f)}
    end},
    {name = "test", needs = "build", run = function(ctx) ctx:sh("echo test >> " .. ctx.params.log) end},
  }}
]]

local function project()
  local dir = h.temp_dir()
  fs.mkdir_p(dir)
  fs.write_file(dir .. "/wf.lua", WORKFLOW)
  return dir
end

local function run(dir, ...)
  fs.write_file(dir .. "/log", "")
  local args = { "run", "--no-progress", "wf.lua", "--param", "log=" .. dir .. "/log" }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  local r = h.smolwf(args, { cwd = dir, env = { PATH = os.getenv("PATH"), SPEC_TOKEN = "t0ken-value" } })
  local report_dir = r.stdout:match("\nreport: ([^\n]+)")
  assert(report_dir, r.stdout .. r.stderr)
  local report = cjson.decode((h.read(dir .. "/" .. report_dir .. "/report.json")))
  local by_id = {}
  for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
  return r, by_id, report, report_dir, h.read(dir .. "/log")
end

describe("smolwf run --resume", function()
  after_each(h.cleanup)

  it("re-runs what failed and its dependents, reusing outputs and exact values of the rest", function()
    local dir = project()
    local r1, _, _, first_dir = run(dir, "--param", "broken=yes")
    assert.are.equal(1, r1.code)
    local r2, by_id, report, _, log = run(dir, "--resume", "--param", "broken=no")
    assert.are.equal(0, r2.code, r2.stdout .. r2.stderr)
    assert.are.equal("secret\nbuild\ntest\n", log, "what ran again")
    assert.are.equal("reused", by_id.fetch.cache.status)
    assert.are.equal(first_dir:match("[^/]*$"), by_id.fetch.resumed_from)
    assert.are.same({ got = "payload\n", f_type = "float" }, by_id.build.value, "outputs and exact values reused")
    assert.are.equal(first_dir, report.resumed_from)
    assert.matches("fetch +reused", r2.stdout)
    local html = h.read(dir .. "/" .. report.resumed_from:gsub("[^/]*$", "") .. r2.stdout:match("\nreport: [^\n]*/([^/\n]+)") .. "/report.html")
    assert.truthy(html:find('resumed from <a href="../' .. first_dir:match("[^/]*$") .. '/report.html">', 1, true))
  end)

  it("resumes the run it is given, and says when there is none to resume", function()
    local dir = project()
    local _, _, _, first_dir = run(dir, "--param", "broken=yes")
    run(dir, "--param", "broken=no")
    local r, _, _, _, log = run(dir, "--resume", first_dir, "--param", "broken=no")
    assert.are.equal(0, r.code, r.stderr)
    assert.are.equal("secret\nbuild\ntest\n", log)
    local other = project()
    r = h.smolwf({ "run", "--resume", "wf.lua" }, { cwd = other, env = { PATH = os.getenv("PATH"), SPEC_TOKEN = "t0ken-value" } })
    assert.are.same({ 2, "smolwf run: --resume: no earlier run of workflow 'resumable' in .smolwf/runs (name one: --resume DIR)\n" },
      { r.code, r.stderr })
    r = h.smolwf({ "run", "--resume=" .. other, "wf.lua" }, { cwd = other, env = { PATH = os.getenv("PATH"), SPEC_TOKEN = "t0ken-value" } })
    assert.are.equal(2, r.code)
    assert.matches("not the report directory of a run %(no resume%.json%)", r.stderr)
  end)
end)
