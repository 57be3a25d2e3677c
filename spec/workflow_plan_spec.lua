-- Matrix expansion, instance dependencies, --step selection, --list tree.
local plan = require "smol.workflow.plan"

local function noop() end

local function ids(instances)
  local out = {}
  for _, inst in ipairs(instances) do out[#out + 1] = inst.id end
  return out
end

describe("workflow plan", function()
  local def = { steps = {
    { name = "collect", needs = { "test" }, always = true, run = noop },
    { name = "test", needs = { "build" }, matrix = { shard = { 1, 2 }, os = { "a", "b" } }, run = noop },
    { name = "build", needs = "deps", run = noop },
    { name = "lint", needs = "deps", run = noop },
    { name = "deps", run = noop },
  } }

  it("expands a matrix into one instance per combination, in topological order", function()
    local insts = plan.instances(def)
    assert.are.same({ "deps", "build", "lint",
      "test[os=a,shard=1]", "test[os=a,shard=2]", "test[os=b,shard=1]", "test[os=b,shard=2]",
      "collect" }, ids(insts))
    assert.are.same({ os = "b", shard = 1 }, insts[6].matrix)
    assert.are.equal("test", insts[6].step)
    assert.are.equal("pending", insts[6].status)
  end)

  it("makes dependents wait for every instance of a matrix step", function()
    local insts = plan.instances(def)
    assert.are.same({ "test[os=a,shard=1]", "test[os=a,shard=2]", "test[os=b,shard=1]",
      "test[os=b,shard=2]" }, insts[8].needs)
    assert.are.same({ "build" }, insts[4].needs)
    assert.is_true(insts[8].always)
  end)

  it("formats integral floats in ids without a fraction", function()
    assert.are.equal("t[n=2]", plan.instance_id("t", { n = 2.0 }, { "n" }))
    assert.are.equal("t[n=2.5]", plan.instance_id("t", { n = 2.5 }, { "n" }))
  end)

  it("selects a step and everything it needs", function()
    local insts = plan.select(plan.instances(def), { "build" })
    assert.are.same({ "deps", "build" }, ids(insts))
    insts = plan.select(plan.instances(def), { "test[os=a,shard=2]" })
    assert.are.same({ "deps", "build", "test[os=a,shard=2]" }, ids(insts))
  end)

  it("names the known steps when a selected one is unknown", function()
    local insts, err = plan.select(plan.instances(def), { "buld" })
    assert.is_nil(insts)
    assert.are.equal("unknown step 'buld' (known steps: deps, build, lint, test, collect)", err)
  end)

  it("draws the steps as a tree", function()
    assert.are.equal(table.concat({
      "deps",
      "├── build",
      "│   └── test  (matrix: 4 instances)",
      "│       └── collect  (always)",
      "└── lint",
    }, "\n"), plan.tree(def))
  end)
end)
