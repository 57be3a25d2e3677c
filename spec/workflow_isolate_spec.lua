-- Matrix instances and the workspace: by default every instance works in
-- the workflow's one shared session (and sees the others' files);
-- `isolate = true` gives each instance a session of its own, forked from
-- the shared one where the provider can fork a session.
local wf = require "smol.workflow"
local task = require "smol.task"
local h = require "spec.workflow_helpers"

local LOCAL = { profile = "local/default", workspace = "" }

local function run(def, opts)
  opts = opts or {}
  opts.report_dir = opts.report_dir or h.temp_dir()
  if opts.reports == nil then opts.reports = false end
  return wf.run(wf.define(def), opts)
end

-- A matrix step whose two instances each write `flags` with their own
-- value, wait until both wrote, then read it back.
local function racing_step(extra)
  local wrote, both = 0, task.event()
  local seen = {}
  local s = { name = "build", matrix = { opt = { "-O0", "-O2" } }, run = function(ctx)
    ctx:write_file("flags", ctx.matrix.opt)
    wrote = wrote + 1
    if wrote == 2 then both:set() end
    both:wait()
    seen[ctx.matrix.opt] = ctx:read_file("flags")
  end }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s, seen
end

describe("matrix instances and the workspace", function()
  after_each(h.cleanup)

  it("share the workflow's session by default: one instance sees the other's files", function()
    local step, seen = racing_step()
    local r = run { sandbox = LOCAL, steps = { step } }
    assert.are.equal("success", r.result)
    assert.are.equal(seen["-O0"], seen["-O2"])
    assert.are.equal(1, #r.sessions)
  end)

  it("get a session each with isolate = true, closed when the instance ends", function()
    local step, seen = racing_step { isolate = true }
    local r = run { sandbox = LOCAL, steps = { step } }
    assert.are.equal("success", r.result, h.find(r, "build[opt=-O0]").error)
    assert.are.same({ ["-O0"] = "-O0", ["-O2"] = "-O2" }, seen)
    assert.are.same({ "step:build[opt=-O0]", "step:build[opt=-O2]" },
      { r.sessions[1].key < r.sessions[2].key and r.sessions[1].key or r.sessions[2].key,
        r.sessions[1].key < r.sessions[2].key and r.sessions[2].key or r.sessions[1].key })
    assert.are.equal("local/default", h.find(r, "build[opt=-O2]").sandbox.profile)
  end)

  it("are forked from the shared session where the session can fork", function()
    local opened, forked, closed = 0, 0, 0
    local function fake(name)
      return { capabilities = { fork = true }, name = name,
        fork = function(self) forked = forked + 1; return fake(self.name .. "/fork" .. forked) end,
        close = function() closed = closed + 1 end }
    end
    local names = {}
    local r = run({ steps = {
      { name = "prepare", run = function(ctx) ctx:session() end },
      { name = "test", needs = "prepare", isolate = true, matrix = { n = { 1, 2 } },
        run = function(ctx) names[ctx.matrix.n] = ctx:session().name end },
    } }, { open = function() opened = opened + 1; return fake("shared") end })
    assert.are.equal("success", r.result, tostring(h.find(r, "test[n=1]").error))
    assert.are.same({ 1, 2 }, { opened, forked })
    assert.are.same({ "shared/fork", "shared/fork" }, { names[1]:sub(1, 11), names[2]:sub(1, 11) })
    assert.are.equal(3, closed)
    assert.are.equal("workflow", h.find(r, "test[n=2]").sandbox.forked_from)
  end)
end)
