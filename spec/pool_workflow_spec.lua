-- Workflows whose sandbox names a pool of providers on this machine: each
-- step placed on a provider, outputs that follow the steps, undeclared
-- files named, lost providers not counted as step failures.
local core = require "smol.core"
local wf = require "smol.workflow"
local testing = require "smol.testing"
local fs = require "smol.fs"
local cjson = require "cjson"
local h = dofile("spec/fixtures/helpers.lua")

local P = core.bundled_provider()

local function pooled(n, extra)
  local programs = {}
  for i = 1, n do programs[i] = P end
  local pool = {programs = programs, slots = 1}
  for k, v in pairs(extra or {}) do pool[k] = v end
  return {profile = "local/default", workspace = "", pool = pool}
end

local function run(def, opts)
  opts = opts or {}
  if opts.cache == nil then opts.cache = false end
  opts.report_dir = opts.report_dir or h.tempdir()
  return testing.run_workflow(wf.define(def), opts)
end

local function report_of(r)
  local text = testing.report_file(r, "report.json")
  assert.is_string(text)
  return cjson.decode(text)
end

local MAKE_APP = "mkdir -p build && printf '#!/bin/sh\\necho app $1\\n' > build/app && chmod +x build/app"
  .. " && echo undeclared > notes.txt"

describe("a workflow on a pool", function()
  after_each(h.cleanup)

  it("places each step on a provider and moves a build's outputs to the tests on the others", function()
    local r = run{
      name = "spread", sandbox = pooled(3),
      steps = {
        {name = "build", outputs = {"build/app"}, run = function(ctx) ctx:sh(MAKE_APP) end},
        {name = "test", needs = "build", matrix = {shard = {1, 2, 3}},
         run = function(ctx) return ctx:sh("./build/app " .. ctx.matrix.shard).stdout end},
      },
    }
    assert.equal("success", r.result)
    assert.equal(3, r.jobs)   -- the pool's slots
    local placed = {}
    for _, id in ipairs{"build", "test[shard=1]", "test[shard=2]", "test[shard=3]"} do
      placed[#placed + 1] = r.by_id[id].placement.provider
    end
    assert.same({1, 1, 2, 3}, placed)
    assert.equal("app 3\n", r.by_id["test[shard=3]"].value)
    local report = report_of(r)
    local by_id = {}
    for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
    assert.same({provider = 2, node = r.pool.providers[2].node}, by_id["test[shard=2]"].placement)
    assert.same(by_id["test[shard=2]"].placement, by_id["test[shard=2]"].attempts[1].placement)
    assert.equal(0, by_id["test[shard=2]"].infra_retries)
    assert.equal(3, #report.pool.providers)
    -- one shared session per provider the steps used
    local keys = {}
    for _, s in ipairs(r.sessions) do keys[#keys + 1] = s.key end
    table.sort(keys)
    assert.same({"workflow@1", "workflow@2", "workflow@3"}, keys)
    local moved = by_id["test[shard=3]"].moved_in
    assert.equal(1, #moved)
    assert.same({"build", 1}, {moved[1].step, moved[1].from})
    assert.is_true(moved[1].bytes > 0)
    assert.equal(cjson.null, by_id["test[shard=1]"].moved_in)   -- it ran where build did
  end)

  it("names the step that made an undeclared file on another provider", function()
    local r = run{
      name = "undeclared", sandbox = pooled(2),
      steps = {
        {name = "build", outputs = {"build/app"}, run = function(ctx) ctx:sh(MAKE_APP) end},
        {name = "hold", needs = "build", run = function(ctx) ctx:sh("true") end},
        {name = "docs", needs = "build", run = function(ctx) ctx:sh("cat notes.txt") end},
        {name = "read", needs = "build", run = function(ctx) return ctx:read_file("notes.txt") end},
      },
    }
    assert.equal("failure", r.result)
    assert.equal(2, r.by_id.docs.placement.provider)
    local node = r.pool.providers[1].node
    assert.matches(("^`notes.txt` is not in this step's session on provider 2 %%(%s%%): step 'build' made it on "
      .. "provider 1 %%(%s%%) without declaring it; declare it in the `outputs` of 'build' so that it follows "
      .. "the steps\ncommand `cat notes.txt` failed"):format(node, node), r.by_id.docs.error)
    if r.by_id.read.placement.provider == 2 then
      assert.matches("^`notes.txt` is not in this step's session on provider 2", r.by_id.read.error)
    end
  end)

  it("runs a step whose provider was lost again on another, without using its retries", function()
    local runs = 0
    local r = run{
      name = "lost", sandbox = pooled(3),
      steps = {
        {name = "victim", retry = {attempts = 1}, run = function(ctx)
          runs = runs + 1
          if runs == 1 then ctx:session():connection():kill("KILL") end
          return ctx:sh("echo ran").stdout
        end},
      },
    }
    assert.equal("success", r.result, r.by_id.victim.error)
    local v = r.by_id.victim
    assert.equal(1, v.infra_retries)
    assert.equal(2, #v.attempts)
    assert.equal("failed", v.attempts[1].status)
    assert.matches("^provider 1 %(.-%) was killed by signal KILL", v.attempts[1].lost)
    assert.equal(1, v.attempts[1].placement.provider)
    assert.equal(2, v.attempts[2].placement.provider)
    assert.same({provider = 2, node = r.pool.providers[2].node}, v.placement)
    assert.is_false(r.pool.providers[1].alive)
    local report = report_of(r)
    assert.matches("killed by signal KILL", report.instances[1].attempts[1].lost)
    assert.equal(1, report.instances[1].infra_retries)
  end)

  it("shows the pool in the plain view, the summary and report.html", function()
    local out = {}
    local buf = {write = function(_, ...) for _, x in ipairs{...} do out[#out + 1] = x end end, flush = function() end}
    local runs = 0
    local r = run({
      name = "views", sandbox = pooled(2, {programs = {P, {P, node = "second"}}}),
      steps = {{name = "victim", run = function(ctx)
        runs = runs + 1
        if runs == 1 then ctx:session():connection():kill("KILL") end
        ctx:sh("true")
      end}},
    }, {observers = {require("smol.workflow.progress").new{out = buf, live = false}}})
    assert.equal("success", r.result)
    local text = table.concat(out)
    local first = r.pool.providers[1].node
    assert.matches(("pool: 2 providers: 1 %s %%(1 slot%%), 2 second %%(1 slot%%)"):format(first), text)
    assert.matches(("[victim] on provider 1 (%s)\n"):format(first), text, 1, true)
    assert.matches(("pool: provider 1 (%s) was killed by signal KILL"):format(first), text, 1, true)
    assert.matches("[victim] runs again on another provider: provider 1 (", text, 1, true)
    assert.matches("[victim] on provider 2 (second)\n", text, 1, true)
    local summary = require("smol.workflow.summary").render(r, {width = false})
    assert.matches("victim  @second", summary, 1, true)
    assert.matches(("pool: 2 providers on %s, second\n  lost: provider 1 (%s) was killed by signal KILL")
      :format(first, first), require("smol.workflow.pool_view").summary(r.pool.providers), 1, true)
    local html = testing.report_file(r, "report.html")
    assert.matches("<h2>By provider</h2>", html, 1, true)
    assert.matches("1 " .. first .. " (lost)", html, 1, true)
    assert.matches(">2 second<", html, 1, true)
    assert.matches('<span class="meta">@second, moved 1×: provider lost</span>', html, 1, true)
  end)

  it("gives up after infra_retries, and when no provider is left names every one lost", function()
    local function killer(ctx)
      ctx:session():connection():kill("KILL")
      ctx:sh("true")
    end
    local r = run{name = "limit", sandbox = pooled(3, {infra_retries = 1}),
      steps = {{name = "victim", run = killer}}}
    assert.equal("failure", r.result)
    assert.equal(1, r.by_id.victim.infra_retries)
    assert.matches("^provider 2 %(.-%) was killed by signal KILL %(run again on another provider 1 time%(s%), "
      .. "the limit: infra_retries = 1%)", r.by_id.victim.error)
    r = run({name = "none left", sandbox = pooled(2, {infra_retries = 5}),
      steps = {{name = "victim", run = killer}, {name = "after", needs = {}, run = function() end}}},
      {keep_going = true})
    assert.equal("failed", r.by_id.victim.status)
    assert.matches("^every provider of the pool is lost: provider 1 %(.-%) was killed by signal KILL; "
      .. "provider 2 %(.-%) was killed by signal KILL", r.by_id.victim.error)
  end)

  it("puts back from the step cache the outputs of a step whose provider was lost", function()
    local r = run({
      name = "lost outputs", sandbox = pooled(3),
      steps = {
        {name = "build", outputs = {"build/app"}, run = function(ctx) ctx:sh(MAKE_APP) end},
        {name = "breaker", needs = "build", run = function(ctx)
          ctx:session():connection():kill("KILL")   -- build's provider: it runs there too
        end},
        {name = "use", needs = "breaker", run = function(ctx) return ctx:sh("./build/app x").stdout end},
      },
    }, {cache = true, cache_dir = h.tempdir()})
    assert.equal("success", r.result, r.by_id.use.error)
    assert.equal(1, r.by_id.breaker.placement.provider)
    assert.is_false(r.pool.providers[1].alive)
    assert.equal("app x\n", r.by_id.use.value)
    assert.equal("cache", r.by_id.use.moved_in[1].via)
  end)

  it("uploads the workspace into each provider's session: workspace = {path, upload = true}", function()
    local dir = h.tempdir()
    fs.write_file(dir .. "/input.txt", "from the host\n")
    local r = run{
      name = "upload", sandbox = {profile = "local/default", workspace = {path = dir, upload = true},
        pool = {programs = {P, P}, slots = 1}},
      steps = {
        {name = "a", run = function(ctx) return ctx:read_file("input.txt") end},
        {name = "b", run = function(ctx) return ctx:read_file("input.txt") end},
      },
    }
    assert.equal("success", r.result)
    assert.same({1, 2}, {r.by_id.a.placement.provider, r.by_id.b.placement.provider})
    assert.equal("from the host\n", r.by_id.b.value)
  end)

  it("fails the run with a setup error when the pool cannot start", function()
    local e = h.catch(run, {name = "nopool",
      sandbox = {pool = {programs = {{"sh", "-c", "echo cannot reach it >&2; exit 2"}}}},
      steps = {{name = "a", run = function() end}}})
    assert.equal("setup", e.code)
    assert.matches("^cannot start the pool of providers: provider 1 %(sh %-c .-%) did not start serving: .*"
      .. "cannot reach it", e.message)
  end)

  it("is checked when the workflow is defined", function()
    for _, case in ipairs{
      {{pool = {programs = {P}, slotz = 1}}, 'workflow sandbox pool: unknown option "slotz"'},
      {{pool = {slurm = {nodes = 0}, infra_retries = -1}}, "workflow sandbox pool: infra_retries must be an integer >= 0"},
      {{pool = 3}, "workflow sandbox: field 'pool' must be a table of sandbox.pool options"},
      {{workspace = {upload = true}}, "workflow sandbox: field 'workspace' must be a path or"},
      {{workspace = {path = ".", upload = true}}, "workflow sandbox: workspace.upload needs a pool"},
    } do
      local e = h.catch(wf.define, {name = "bad", sandbox = case[1], steps = {{name = "a", run = function() end}}})
      assert.is_true(wf.is_invalid(e))
      assert.matches(case[2], e.message, 1, true)
    end
    local e = h.catch(wf.define, {name = "bad", steps = {{name = "a", sandbox = {pool = {programs = {P}}},
      run = function() end}}})
    assert.matches("step 'a' sandbox: a step cannot have a pool of its own", e.message, 1, true)
  end)
end)
