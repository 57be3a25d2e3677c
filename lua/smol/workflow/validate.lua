-- Validation of a workflow definition, before anything runs.
--
-- Every problem found is collected (not just the first) so that a user fixes
-- a workflow in one go; each message names the step and the field involved.
-- The result is one error value {code = "invalid_workflow", problems = {...}}.
local text = require "smol.workflow.text"

local M = {}

local INVALID_MT = {
  __tostring = function(e) return e.message end,
}

local WORKFLOW_FIELDS = {
  name = "string", description = "string", sandbox = "sandbox",
  jobs = "count", steps = "steps", params = "table", env = "env", secrets = "secrets",
}
local STEP_FIELDS = {
  name = "name", run = "function", needs = "needs", timeout = "positive",
  matrix = "matrix", retry = "retry", continue_on_error = "boolean",
  always = "boolean", sandbox = "sandbox", description = "string",
  env = "env", when = "function", ["if"] = "function", isolate = "boolean",
  inputs = "globs", outputs = "globs", cache = "boolean",
}
-- A secret comes from the host's environment or from a --param.
local SECRET_FIELDS = { env = "string", param = "string", optional = "boolean" }
-- sandbox.open's options (smol.sandbox): a misspelled one would be ignored.
local SANDBOX_FIELDS = {
  program = "program", profile = "profile", workspace = "workspace", cwd = "string",
  group = "string", max_line_bytes = "count", max_depth = "count", pool = "pool",
  open_timeout = "positive",
}
local RETRY_FIELDS = { attempts = "count", backoff = "nonnegative", when = "function" }

-- Levenshtein distance, used to suggest the field a user meant (`neeeds`).
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The candidate closest to `word` when it is close enough to be what was
-- meant (a typo: at most 2 edits, or a third of the word), else nil.
function M.closest(word, candidates)
  local sorted = table.move(candidates, 1, #candidates, 1, {})
  table.sort(sorted)
  local best, best_d = nil, math.huge
  for _, name in ipairs(sorted) do
    local d = distance(word, name)
    if d < best_d then best, best_d = name, d end
  end
  if best and best_d <= math.max(2, #word // 3) then return best end
end

-- "did you mean 'needs'?" when a known field is close, else the list of fields.
local function unknown_field_hint(field, known)
  local best = M.closest(field, sorted_keys(known))
  if best then return ("did you mean '%s'?"):format(best) end
  return "known fields: " .. table.concat(sorted_keys(known), ", ")
end

local function is_list(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function is_scalar(v)
  local t = type(v)
  return t == "string" or t == "number" or t == "boolean"
end

M.is_list = is_list
M.sorted_keys = sorted_keys

local KIND_TEXT = {
  count = "a positive integer", positive = "a positive number",
  nonnegative = "a number >= 0", needs = "a step name or a list of step names",
  matrix = "a table of lists of values, e.g. {shard = {1, 2}}",
  retry = "a table {attempts = N, backoff = SECONDS, when = function}",
  name = "a non-empty string without '[' or ']'", steps = "a non-empty list of steps",
  sandbox = "a table of sandbox.open options", profile = "a string or {provider = ..., name = ...}",
  workspace = 'a path or {path = ".", exclude = {...}, mode = ..., upload = true}',
  pool = "a table of sandbox.pool options, e.g. {slurm = {nodes = 3}}",
  env = 'a table of environment variables, e.g. {CC = "gcc"}',
  globs = 'a path pattern or a list of them, e.g. {"src/**.c", "Makefile"}',
  secrets = 'a table of secrets, e.g. {TOKEN = {env = "TOKEN"}, KEY = {param = "key"}}',
}

local ENV_NAME = "^[%a_][%w_]*$"

local function env_ok(v)
  if type(v) ~= "table" then return false end
  for k, x in pairs(v) do
    if type(k) ~= "string" or not k:find(ENV_NAME) or type(x) ~= "string" then return false end
  end
  return true
end

local function globs_ok(v)
  if type(v) == "string" then return v ~= "" end
  if not is_list(v) then return false end
  for _, x in ipairs(v) do
    if type(x) ~= "string" or x == "" then return false end
  end
  return true
end

local function secrets_ok(v)
  if type(v) ~= "table" then return false end
  for k, x in pairs(v) do
    if type(k) ~= "string" or not k:find(ENV_NAME) or type(x) ~= "table" then return false end
  end
  return true
end

-- An include/exclude entry: a non-empty table of matrix values by key.
local function combination_ok(c)
  if type(c) ~= "table" or next(c) == nil then return false end
  for k, x in pairs(c) do
    if type(k) ~= "string" or not is_scalar(x) then return false end
  end
  return true
end

local function combinations_ok(list)
  if not is_list(list) or #list == 0 then return false end
  for _, c in ipairs(list) do
    if not combination_ok(c) then return false end
  end
  return true
end

-- {key = {values...}, include = {{...}}, exclude = {{...}}}, as GitHub
-- Actions has it: at least one key, or an include list.
local function matrix_ok(v)
  if type(v) ~= "table" or next(v) == nil then return false end
  for k, values in pairs(v) do
    if k == "include" or k == "exclude" then
      if not combinations_ok(values) then return false end
    elseif type(k) ~= "string" or not is_list(values) or #values == 0 then
      return false
    else
      for _, x in ipairs(values) do
        if not is_scalar(x) then return false end
      end
    end
  end
  return true
end

local function needs_ok(v)
  if type(v) == "string" then return true end
  if not is_list(v) then return false end
  for _, x in ipairs(v) do
    if type(x) ~= "string" then return false end
  end
  return true
end

local CHECKS = {
  count = function(v) return math.type(v) == "integer" and v > 0 end,
  positive = function(v) return type(v) == "number" and v > 0 end,
  nonnegative = function(v) return type(v) == "number" and v >= 0 end,
  name = function(v) return type(v) == "string" and v ~= "" and not v:find("[%[%]]") end,
  steps = function(v) return is_list(v) and #v > 0 end,
  needs = needs_ok, matrix = matrix_ok, env = env_ok, globs = globs_ok, secrets = secrets_ok,
  retry = function(v) return type(v) == "table" end,
  sandbox = function(v) return type(v) == "table" end,
  profile = function(v) return type(v) == "string" or type(v) == "table" end,
  -- a path, or {path =, exclude =, mode =} (smol.sandbox) with upload = true on a pool (smol.pool)
  workspace = function(v) return type(v) == "string" or (type(v) == "table" and type(v.path) == "string") end,
  pool = function(v) return type(v) == "table" end,
  -- a path or name, or an argv list (smol.sandbox)
  program = function(v) return (type(v) == "string" and v ~= "") or (is_list(v) and #v > 0) end,
}

local function value_ok(kind, v)
  local check = CHECKS[kind]
  if check then return check(v) end
  return type(v) == kind
end

-- A short rendering of a value for messages: the offending value itself
-- ("0", "'x'", "{shard = 3}"), not just its type.
local function show(v) return text.show(v) end
M.show = show

-- Checks every field of table `t` against `schema`; `where` prefixes messages.
local function check_fields(t, schema, where, problems)
  for _, field in ipairs(sorted_keys(t)) do
    local kind = schema[field]
    if type(field) ~= "string" then
      problems[#problems + 1] = ("%s: unexpected entry [%s]"):format(where, tostring(field))
    elseif not kind then
      problems[#problems + 1] = ("%s: unknown field '%s' (%s)")
        :format(where, field, unknown_field_hint(field, schema))
    elseif not value_ok(kind, t[field]) then
      problems[#problems + 1] = ("%s: field '%s' must be %s, got %s")
        :format(where, field, KIND_TEXT[kind] or ("a " .. kind), show(t[field]))
    end
  end
end
M.check_fields = check_fields

-- The workflow's pool: sandbox.pool's options (checked as it checks them)
-- and infra_retries.
function M.check_pool(pool, problems)
  local opts = {}
  for k, v in pairs(pool) do if k ~= "infra_retries" then opts[k] = v end end
  local ok, err = pcall(require("smol.pool.launch").check, opts, 1)
  if not ok then
    problems[#problems + 1] = "workflow sandbox pool: " .. tostring(err):gsub("^[^\n]-sandbox%.pool: ", "")
  end
  local n = pool.infra_retries
  if n ~= nil and (math.type(n) ~= "integer" or n < 0) then
    problems[#problems + 1] = ("workflow sandbox pool: infra_retries must be an integer >= 0, got %s"):format(show(n))
  end
end

-- Each secret names exactly one source: {env = "VAR"} or {param = "name"}.
function M.check_secrets(secrets, problems)
  for _, name in ipairs(sorted_keys(secrets)) do
    local where = ("workflow secret '%s'"):format(name)
    local spec = secrets[name]
    check_fields(spec, SECRET_FIELDS, where, problems)
    if (spec.env == nil) == (spec.param == nil) then
      problems[#problems + 1] = where .. ': give one source, {env = "VAR"} or {param = "name"}'
    end
  end
end

local function needs_list(step)
  if type(step.needs) == "string" then return { step.needs } end
  return step.needs or {}
end
M.needs_list = needs_list

local function check_step(step, i, problems, seen)
  if type(step) ~= "table" then
    problems[#problems + 1] = ("step #%d: must be a table, got %s"):format(i, show(step))
    return
  end
  local where = type(step.name) == "string" and ("step '%s'"):format(step.name)
    or ("step #%d"):format(i)
  check_fields(step, STEP_FIELDS, where, problems)
  if step.name == nil then problems[#problems + 1] = where .. ": missing field 'name'" end
  if step.run == nil then problems[#problems + 1] = where .. ": missing field 'run'" end
  if type(step.retry) == "table" then
    check_fields(step.retry, RETRY_FIELDS, where .. " retry", problems)
  end
  if type(step.sandbox) == "table" then
    check_fields(step.sandbox, SANDBOX_FIELDS, where .. " sandbox", problems)
    if step.sandbox.pool ~= nil then
      problems[#problems + 1] = where .. " sandbox: a step cannot have a pool of its own (the workflow's sandbox names it)"
    end
  end
  if step.when ~= nil and step["if"] ~= nil then
    problems[#problems + 1] = where .. ": give 'when' or 'if', not both (they are the same)"
  end
  if type(step.name) == "string" then
    if seen[step.name] then
      problems[#problems + 1] = ("duplicate step name '%s' (steps #%d and #%d)")
        :format(step.name, seen[step.name], i)
    else
      seen[step.name] = i
    end
  end
end

local function check_needs(steps, seen, problems)
  local known = table.concat(sorted_keys(seen), ", ")
  for _, step in ipairs(steps) do
    if type(step) == "table" and type(step.name) == "string" and needs_ok(step.needs or {}) then
      for _, need in ipairs(needs_list(step)) do
        if not seen[need] then
          problems[#problems + 1] = ("step '%s' needs unknown step '%s' (known steps: %s)")
            :format(step.name, need, known)
        elseif need == step.name then
          problems[#problems + 1] = ("step '%s' needs itself"):format(step.name)
        end
      end
    end
  end
end

-- Depth-first search for a cycle; returns it as {"a", "b", "a"} or nil.
local function find_cycle(steps, by_name)
  local state, stack = {}, {}
  local function visit(name)
    state[name] = "active"; stack[#stack + 1] = name
    for _, need in ipairs(needs_list(by_name[name])) do
      if by_name[need] and need ~= name then
        if state[need] == "active" then
          local cycle, start = {}, nil
          for k, n in ipairs(stack) do if n == need then start = k end end
          for k = start, #stack do cycle[#cycle + 1] = stack[k] end
          cycle[#cycle + 1] = need
          return cycle
        elseif not state[need] then
          local c = visit(need)
          if c then return c end
        end
      end
    end
    state[name] = "done"; stack[#stack] = nil
  end
  for _, step in ipairs(steps) do
    if not state[step.name] then
      local c = visit(step.name)
      if c then return c end
    end
  end
end

local function well_formed_steps(steps)
  local by_name, list = {}, {}
  for _, step in ipairs(steps) do
    if type(step) == "table" and type(step.name) == "string" and needs_ok(step.needs or {})
        and not by_name[step.name] then
      by_name[step.name] = step; list[#list + 1] = step
    end
  end
  return list, by_name
end

local function error_message(name, problems)
  local head = name and ("invalid workflow '%s'"):format(name) or "invalid workflow"
  return #problems == 1 and (head .. ": " .. problems[1])
    or (head .. ":\n  " .. table.concat(problems, "\n  "))
end

-- `name` may be nil (a workflow without one): M.named() names it later,
-- e.g. by its file name once the CLI knows it.
function M.new_error(name, problems)
  return setmetatable({ code = "invalid_workflow", message = error_message(name, problems),
    problems = problems, name = name }, INVALID_MT)
end

-- The error again, named `fallback` when the workflow had no name.
function M.named(err, fallback)
  if err.name or not fallback then return err end
  err.name, err.message = fallback, error_message(fallback, err.problems)
  return err
end

function M.is_invalid(err)
  return type(err) == "table" and err.code == "invalid_workflow"
end

-- Returns nil when `def` is a valid workflow, else the list of problems.
function M.problems(def)
  if type(def) ~= "table" then return { "a workflow must be a table, got " .. show(def) } end
  local problems = {}
  check_fields(def, WORKFLOW_FIELDS, "workflow", problems)
  if type(def.sandbox) == "table" then
    check_fields(def.sandbox, SANDBOX_FIELDS, "workflow sandbox", problems)
    if type(def.sandbox.pool) == "table" then M.check_pool(def.sandbox.pool, problems) end
    local ws = def.sandbox.workspace
    if type(ws) == "table" and ws.upload and def.sandbox.pool == nil then
      problems[#problems + 1] = "workflow sandbox: workspace.upload needs a pool (sandbox = {pool = {...}}); "
        .. "without one the workspace is this machine's already"
    end
  end
  if secrets_ok(def.secrets) then M.check_secrets(def.secrets, problems) end
  if def.steps == nil then problems[#problems + 1] = "workflow: missing field 'steps'" end
  if not is_list(def.steps) then return problems end
  local seen = {}
  for i, step in ipairs(def.steps) do check_step(step, i, problems, seen) end
  check_needs(def.steps, seen, problems)
  local list, by_name = well_formed_steps(def.steps)
  local cycle = find_cycle(list, by_name)
  if cycle then
    problems[#problems + 1] = "dependency cycle: " .. table.concat(cycle, " -> ")
  end
  if #problems > 0 then return problems end
end

-- Raises the invalid_workflow error when `def` is not valid.
function M.check(def)
  local problems = M.problems(def)
  if problems then
    local name = type(def) == "table" and type(def.name) == "string" and def.name or nil
    error(M.new_error(name, problems), 0)
  end
  return def
end

return M
