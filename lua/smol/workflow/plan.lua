-- From a validated definition to the run's step instances: matrix expansion,
-- dependencies between instances, topological order, --step selection and
-- the --list tree. Pure functions: no I/O, no tasks.
local validate = require "smol.workflow.validate"

local M = {}

local function format_value(v)
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2^53 then
    return tostring(math.tointeger(v))
  end
  return tostring(v)
end

local SPECIAL = { include = true, exclude = true }

-- The matrix's own keys (not include/exclude), sorted.
local function base_keys(matrix)
  local keys = {}
  for _, k in ipairs(validate.sorted_keys(matrix)) do
    if not SPECIAL[k] then keys[#keys + 1] = k end
  end
  return keys
end

local function product(matrix, keys)
  if #keys == 0 then return {} end
  local result = { {} }
  for _, key in ipairs(keys) do
    local next_result = {}
    for _, partial in ipairs(result) do
      for _, value in ipairs(matrix[key]) do
        local combo = {}
        for k, v in pairs(partial) do combo[k] = v end
        combo[key] = value
        next_result[#next_result + 1] = combo
      end
    end
    result = next_result
  end
  return result
end

-- Whether combo has every value of `entry` (an exclude entry, or an
-- include entry restricted to the matrix's own keys).
local function has_all(combo, entry, only)
  for k, v in pairs(entry) do
    if (not only or only[k]) and combo[k] ~= v then return false end
  end
  return true
end

-- GitHub Actions' include: the entry's values are added to every original
-- combination whose own matrix values it does not change (values added by
-- an earlier include may be changed); one that fits none is a combination
-- of its own.
local function apply_include(combos, originals, entry, own)
  local fitted = false
  for i = 1, originals do
    if has_all(combos[i], entry, own) then
      fitted = true
      for k, v in pairs(entry) do if not own[k] then combos[i][k] = v end end
    end
  end
  if not fitted then
    local combo = {}
    for k, v in pairs(entry) do combo[k] = v end
    combos[#combos + 1] = combo
  end
end

-- Whether a step's results may come from the step cache: it declares
-- inputs or outputs (or cache = true), and does not say cache = false.
function M.cacheable(def)
  return def.cache ~= false and (def.inputs ~= nil or def.outputs ~= nil or def.cache == true)
end

--[[
Every combination of a matrix, as GitHub Actions makes them: the product
of the values ({shard = {1, 2}, os = {"a"}} -> {os="a",shard=1},
{os="a",shard=2}), less those matching an `exclude` entry, then each
`include` entry added (see apply_include). Ids list the keys in sorted
order, so they are stable.
]]
function M.combinations(matrix)
  local keys = base_keys(matrix)
  local own = {}
  for _, k in ipairs(keys) do own[k] = true end
  local combos = {}
  for _, combo in ipairs(product(matrix, keys)) do
    local excluded = false
    for _, entry in ipairs(matrix.exclude or {}) do excluded = excluded or has_all(combo, entry) end
    if not excluded then combos[#combos + 1] = combo end
  end
  local originals = #combos
  for _, entry in ipairs(matrix.include or {}) do apply_include(combos, originals, entry, own) end
  return combos
end

function M.instance_id(step_name, combo, keys)
  if not combo then return step_name end
  keys = keys or validate.sorted_keys(combo)
  local parts = {}
  for _, key in ipairs(keys) do parts[#parts + 1] = key .. "=" .. format_value(combo[key]) end
  return step_name .. "[" .. table.concat(parts, ",") .. "]"
end

local function new_instance(step, combo)
  return {
    id = M.instance_id(step.name, combo), step = step.name, matrix = combo,
    needs = {}, status = "pending", attempts = {}, artifacts = {},
    timeout = step.timeout, continue_on_error = step.continue_on_error == true,
    always = step.always == true, def = step,
  }
end

local function expand_step(step)
  if not step.matrix then return { new_instance(step) } end
  local out = {}
  for _, combo in ipairs(M.combinations(step.matrix)) do out[#out + 1] = new_instance(step, combo) end
  return out
end

-- Whether an instance of a needed step is one `inst` waits for: a matrix
-- instance needing a matrix step waits only for the instances that agree
-- on the keys both have (test[cc=gcc] for build[cc=gcc], not
-- build[cc=clang]); without a key in common, for every instance.
function M.matches(inst, dep)
  if not (inst.matrix and dep.matrix) then return true end
  for k, v in pairs(inst.matrix) do
    if dep.matrix[k] ~= nil and dep.matrix[k] ~= v then return false end
  end
  return true
end

-- Each step's index, its needs (as indices) and its dependents (indices).
local function step_graph(steps)
  local index, needs, dependents = {}, {}, {}
  for i, step in ipairs(steps) do index[step.name], dependents[i] = i, {} end
  for i, step in ipairs(steps) do
    needs[i] = {}
    for _, name in ipairs(validate.needs_list(step)) do
      local j = assert(index[name], "a validated workflow needs only its own steps")
      needs[i][#needs[i] + 1] = j
      table.insert(dependents[j], i)
    end
  end
  return needs, dependents
end

--[[
The order of repeated passes over the definition, each placing (in
definition order) every step whose needs are placed, earlier in the same
pass included: a step goes in the first pass after all its needs are
placed, i.e. the pass of a need defined before it, or the one after the
pass of a need defined after it. Kahn's algorithm gives each step its pass
once its needs have theirs; the steps are then listed by pass, in
definition order within one. Linear in steps and needs: a chain defined
in reverse order takes as many passes as it has steps.
]]
local function passes(steps)
  local needs, dependents = step_graph(steps)
  local waiting, ready, pass = {}, {}, {}
  for i = 1, #steps do
    waiting[i] = #needs[i]
    if waiting[i] == 0 then ready[#ready + 1] = i end
  end
  local head = 1
  while head <= #ready do
    local i = ready[head]
    head = head + 1
    pass[i] = 1
    for _, j in ipairs(needs[i]) do pass[i] = math.max(pass[i], j < i and pass[j] or pass[j] + 1) end
    for _, d in ipairs(dependents[i]) do
      waiting[d] = waiting[d] - 1
      if waiting[d] == 0 then ready[#ready + 1] = d end
    end
  end
  assert(#ready == #steps, "cycle in a validated workflow")
  return pass
end

-- Whether every step needs only steps defined before it (then all are
-- placed in the first pass: the definition order is the order).
local function defined_in_order(steps)
  local seen = {}
  for _, step in ipairs(steps) do
    if step.needs ~= nil then
      for _, name in ipairs(validate.needs_list(step)) do
        if not seen[name] then return false end
      end
    end
    seen[step.name] = true
  end
  return true
end

-- The steps in topological order, ties broken by definition order (see passes).
function M.step_order(steps)
  if defined_in_order(steps) then return table.move(steps, 1, #steps, 1, {}) end
  local pass, by_pass, order = passes(steps), {}, {}
  for i, step in ipairs(steps) do
    by_pass[pass[i]] = by_pass[pass[i]] or {}
    table.insert(by_pass[pass[i]], step)
  end
  -- (every pass up to the last has a step: a step's pass is 1 or one more than a need's)
  for _, in_pass in ipairs(by_pass) do table.move(in_pass, 1, #in_pass, #order + 1, order) end
  return order
end

-- Adds to inst.needs the instances of `need` it waits for (see matches);
-- returns false when none of them matches.
local function add_needs(inst, deps)
  local any = false
  for _, dep in ipairs(deps) do
    if M.matches(inst, dep) then inst.needs[#inst.needs + 1] = dep.id; any = true end
  end
  return any
end

-- Returns the instances in topological order, each inst.needs the ids of
-- the instances it waits for (see matches), and the problems found (an
-- empty matrix, a combination given twice, a matrix instance with no
-- matching instance of a step it needs), or nil.
function M.expand(def)
  local by_step, all, problems, seen = {}, {}, {}, {}
  for _, step in ipairs(M.step_order(def.steps)) do
    local insts = expand_step(step)
    by_step[step.name] = insts
    if #insts == 0 then problems[#problems + 1] = ("step '%s': its matrix excludes every combination"):format(step.name) end
    for _, inst in ipairs(insts) do
      if seen[inst.id] then problems[#problems + 1] = ("step '%s': the matrix gives %s twice"):format(step.name, inst.id) end
      seen[inst.id] = true
      for _, need in ipairs(validate.needs_list(step)) do
        if not add_needs(inst, by_step[need]) and #by_step[need] > 0 then
          problems[#problems + 1] = ("%s needs '%s', but no instance of '%s' has its matrix values")
            :format(inst.id, need, need)
        end
      end
      all[#all + 1] = inst
    end
  end
  return all, #problems > 0 and problems or nil
end

function M.instances(def)
  return (M.expand(def))
end

-- Raises the invalid_workflow error for the problems expand finds. Only a
-- matrix can make one: without, each step is one instance, with one of
-- every step it needs, so the expansion is not made (run makes it).
function M.check(def)
  local any_matrix = false
  for _, step in ipairs(def.steps) do any_matrix = any_matrix or step.matrix ~= nil end
  if not any_matrix then return def end
  local _, problems = M.expand(def)
  if problems then error(validate.new_error(def.name, problems), 0) end
  return def
end

-- Keeps the instances of the named steps (or instance ids) and everything
-- they need. Returns nil, message when a name is unknown.
function M.select(instances, names)
  local by_id, keep = {}, {}
  for _, inst in ipairs(instances) do by_id[inst.id] = inst end
  local function mark(inst)
    if keep[inst.id] then return end
    keep[inst.id] = true
    for _, need in ipairs(inst.needs) do mark(by_id[need]) end
  end
  for _, name in ipairs(names) do
    local found = false
    for _, inst in ipairs(instances) do
      if inst.step == name or inst.id == name then mark(inst); found = true end
    end
    if not found then
      local known, seen = {}, {}
      for _, inst in ipairs(instances) do
        if not seen[inst.step] then seen[inst.step] = true; known[#known + 1] = inst.step end
      end
      return nil, ("unknown step '%s' (known steps: %s)"):format(name, table.concat(known, ", "))
    end
  end
  local out = {}
  for _, inst in ipairs(instances) do if keep[inst.id] then out[#out + 1] = inst end end
  return out
end

local function step_flags(step)
  local flags = {}
  if step.matrix then
    local n = #M.combinations(step.matrix)
    flags[#flags + 1] = ("matrix: %d instance%s"):format(n, n == 1 and "" or "s")
  end
  if step.timeout then flags[#flags + 1] = ("timeout %gs"):format(step.timeout) end
  if step.retry then flags[#flags + 1] = ("retry x%d"):format(step.retry.attempts or 1) end
  if step.continue_on_error then flags[#flags + 1] = "continue_on_error" end
  if step.always then flags[#flags + 1] = "always" end
  if step.sandbox then flags[#flags + 1] = "own sandbox" end
  if #flags == 0 then return "" end
  return "  (" .. table.concat(flags, ", ") .. ")"
end

-- The steps as a tree: roots first, each step's dependents below it. A step
-- needed by several others appears under each, its subtree shown once.
function M.tree(def)
  local dependents, roots = {}, {}
  for _, step in ipairs(def.steps) do
    local needs = validate.needs_list(step)
    if #needs == 0 then roots[#roots + 1] = step end
    for _, need in ipairs(needs) do
      dependents[need] = dependents[need] or {}
      table.insert(dependents[need], step)
    end
  end
  local lines, shown = {}, {}
  local function walk(step, prefix, last, top)
    local branch = top and "" or (last and "└── " or "├── ")
    local again = shown[step.name] and (dependents[step.name] and "  (see above)" or "") or nil
    lines[#lines + 1] = prefix .. branch .. step.name .. (again or step_flags(step))
    if again then return end
    shown[step.name] = true
    local children = dependents[step.name] or {}
    local child_prefix = top and "" or (prefix .. (last and "    " or "│   "))
    for i, child in ipairs(children) do walk(child, child_prefix, i == #children, false) end
  end
  for _, root in ipairs(roots) do walk(root, "", true, true) end
  return table.concat(lines, "\n")
end

return M
