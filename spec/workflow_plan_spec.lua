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

  it("orders as passes over the definition would: each pass takes, in definition order, what is ready", function()
    local passes = { steps = {
      { name = "c", needs = "b", run = noop }, { name = "a", run = noop }, { name = "b", needs = "a", run = noop },
      { name = "d", needs = { "c", "a" }, run = noop }, { name = "e", run = noop },
    } }
    assert.are.same({ "a", "b", "e", "c", "d" }, ids(plan.instances(passes)))
    local chain, n = { steps = {} }, 2000
    for i = 1, n do chain.steps[i] = { name = "c" .. (n - i + 1), needs = i < n and ("c" .. (n - i)) or nil, run = noop } end
    local order = ids(plan.instances(chain))
    assert.are.same({ "c1", "c2", "c" .. n }, { order[1], order[2], order[n] })
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

describe("workflow matrix include and exclude (GitHub Actions semantics)", function()
  local function combos(matrix)
    local out = {}
    for _, inst in ipairs(plan.instances { steps = { { name = "t", matrix = matrix, run = noop } } }) do
      out[#out + 1] = inst.id
    end
    return out
  end

  it("adds include values to the combinations they fit, and makes new ones of the rest", function()
    -- The example of GitHub's documentation, "Expanding or adding matrix configurations".
    assert.are.same({
      "t[animal=cat,color=pink,fruit=apple,shape=circle]",
      "t[animal=cat,color=pink,fruit=pear]",
      "t[animal=dog,color=green,fruit=apple,shape=circle]",
      "t[animal=dog,color=green,fruit=pear]",
      "t[fruit=banana]",
      "t[animal=cat,fruit=banana]",
    }, combos { fruit = { "apple", "pear" }, animal = { "cat", "dog" }, include = {
      { color = "green" }, { color = "pink", animal = "cat" }, { fruit = "apple", shape = "circle" },
      { fruit = "banana" }, { fruit = "banana", animal = "cat" } } })
  end)

  it("removes the combinations an exclude entry matches, before includes", function()
    assert.are.same({ "t[cc=gcc,opt=-O0]", "t[cc=gcc,opt=-O2]", "t[cc=clang,opt=-O2]", "t[cc=clang,opt=-O0,san=asan]" },
      combos { cc = { "gcc", "clang" }, opt = { "-O0", "-O2" }, exclude = { { cc = "clang", opt = "-O0" } },
        include = { { cc = "clang", opt = "-O0", san = "asan" } } })
    assert.are.same({ "t[os=linux]", "t[os=mac]" }, combos { include = { { os = "linux" }, { os = "mac" } } })
  end)

  it("refuses a matrix that excludes everything or gives a combination twice", function()
    local wf = require "smol.workflow"
    local ok, err = pcall(wf.define, { steps = { { name = "t", run = noop,
      matrix = { cc = { "gcc" }, exclude = { { cc = "gcc" } } } } } })
    assert.is_false(ok)
    assert.matches("step 't': its matrix excludes every combination", tostring(err))
    ok, err = pcall(wf.define, { steps = { { name = "t", run = noop,
      matrix = { include = { { os = "a" }, { os = "a" } } } } } })
    assert.matches("step 't': the matrix gives t%[os=a%] twice", tostring(err))
    ok, err = pcall(wf.define, { steps = { { name = "t", run = noop, matrix = { cc = { "gcc" }, exclude = { "gcc" } } } } })
    assert.matches("field 'matrix' must be", tostring(err))
  end)
end)

describe("workflow needs between matrix steps", function()
  local function needs_of(def)
    local out = {}
    for _, inst in ipairs(plan.instances(def)) do out[inst.id] = table.concat(inst.needs, " ") end
    return out
  end

  it("makes a matrix instance wait only for the instances that agree on the keys both have", function()
    local n = needs_of { steps = {
      { name = "build", matrix = { cc = { "gcc", "clang" } }, run = noop },
      { name = "test", needs = "build", matrix = { cc = { "gcc", "clang" }, opt = { "-O0", "-O2" } }, run = noop },
      { name = "lint", needs = "build", matrix = { tool = { "a" } }, run = noop },
      { name = "package", needs = "test", run = noop },
    } }
    assert.are.equal("build[cc=gcc]", n["test[cc=gcc,opt=-O0]"])
    assert.are.equal("build[cc=clang]", n["test[cc=clang,opt=-O2]"])
    assert.are.equal("build[cc=gcc] build[cc=clang]", n["lint[tool=a]"])
    assert.are.equal(4, select(2, n.package:gsub("test%[", "")))
  end)

  it("refuses a matrix instance that no instance of a needed step matches", function()
    local wf = require "smol.workflow"
    local ok, err = pcall(wf.define, { steps = {
      { name = "build", matrix = { cc = { "gcc" } }, run = noop },
      { name = "test", needs = "build", matrix = { cc = { "gcc", "icc" } }, run = noop },
    } })
    assert.is_false(ok)
    assert.matches("test%[cc=icc%] needs 'build', but no instance of 'build' has its matrix values", tostring(err))
  end)
end)
