--[[
The key of a step instance in the step cache: named parts, each a digest
(SHA-256, hex), so that --explain can say exactly which part changed.
The static parts are known before the step runs:

  engine              the smolwf version
  code                the step's function (its bytecode, without debug info:
                      a moved line or a comment changes nothing)
  upvalue NAME        each value the function closes over, followed into
                      tables and functions (their bytecode and upvalues);
                      a loaded module is named, and a project module's
                      source is a dynamic part (below)
  globals             the workflow file's own globals (its environment)
  matrix KEY          each matrix value of the instance
  env NAME            each variable of the step's env (workflow + step)
  secrets             the names of the secrets (their values are not in the
                      key: a digest of a weak secret in the cache could be
                      guessed; a step that depends on a secret's value
                      should say cache = false)
  profile, provider   the session's profile, and the provider program (its
                      path and the digest of its executable)
  inputs, input PATH  the input patterns, and each file they match (its
                      content) or "missing" for a literal path not there
  outputs             the output patterns
  need ID             each instance it waits for: its key, or its return value

The dynamic parts are only known once the step ran, and are kept with
each result stored under the static key (a step with several of them has
several results, told apart by these):

  param NAME          each parameter the step read (ctx.params.NAME), its
                      value: a parameter it does not read changes nothing
  module NAME         the source of every project Lua module loaded when the
                      step ended (one it requires inside its function too)

A project module is one found on package.path outside the engine's own
directory and the system's (/usr). The key of a result is the digest of
its static and dynamic parts together.
]]
local core = require "smol.core"
local env = require "smol.workflow.env"
local glob = require "smol.workflow.glob"

local M = {}

M.VERSION = "1"

local Uncacheable = {}

local function uncacheable(why)
  error(setmetatable({ why = why }, Uncacheable), 0)
end

-- ===== Names of values a step may close over ================================

local STD = { "string", "table", "math", "utf8", "coroutine", "debug", "io", "os", "package" }

-- value -> "lib:string.format" / "mod:lfs" for what is not the step's own:
-- standard libraries, base functions, loaded modules and their fields.
function M.known_values()
  local known = {}
  local function add(v, name)
    if (type(v) == "table" or type(v) == "function" or type(v) == "userdata") and not known[v] then known[v] = name end
  end
  for k, v in pairs(_G) do if type(v) == "function" then add(v, "lib:" .. k) end end
  for _, lib in ipairs(STD) do
    add(_G[lib], "lib:" .. lib)
    for k, v in pairs(_G[lib]) do add(v, "lib:" .. lib .. "." .. tostring(k)) end
  end
  add(_G, "lib:_G")
  for name, mod in pairs(package.loaded) do
    add(mod, "mod:" .. name)
    if type(mod) == "table" then
      for k, v in pairs(mod) do if type(v) ~= "table" then add(v, "mod:" .. name .. "." .. tostring(k)) end end
    end
  end
  return known
end

-- ===== Project modules ======================================================

local ENGINE_DIR = (debug.getinfo(1, "S").source:match("^@(.*/)workflow/[^/]*$"))

--- The source file of a project module, or nil (engine, system, C module).
function M.project_module_file(name)
  local file = package.searchpath(name, package.path)
  if not file then return nil end
  if ENGINE_DIR and file:sub(1, #ENGINE_DIR) == ENGINE_DIR then return nil end
  if file:sub(1, 5) == "/usr/" then return nil end
  return file
end

local function module_digest(name, memo)
  if memo[name] == nil then
    local file = M.project_module_file(name)
    memo[name] = file and core.sha256_file(file) or "missing"
  end
  return memo[name]
end

--- The project modules loaded now (package.loaded), as a set of names.
function M.loaded_project_modules()
  local names = {}
  for name in pairs(package.loaded) do
    if type(name) == "string" and M.project_module_file(name) then names[name] = true end
  end
  return names
end

-- ===== Fingerprints of values ===============================================

local fingerprint

local function table_fingerprint(t, st, depth)
  local entries = {}
  for k, v in pairs(t) do
    entries[#entries + 1] = fingerprint(k, st, depth + 1) .. "=" .. fingerprint(v, st, depth + 1)
  end
  table.sort(entries)
  local mt = debug.getmetatable(t)
  local meta = mt and ("M" .. fingerprint(mt, st, depth + 1)) or ""
  return "T{" .. table.concat(entries, ";") .. "}" .. meta
end

-- The workflow file's environment: only the globals the file defined.
local function env_fingerprint(t, st, depth)
  local entries = {}
  for k, v in pairs(t) do
    if not env.is_builtin(k) then
      entries[#entries + 1] = fingerprint(k, st, depth + 1) .. "=" .. fingerprint(v, st, depth + 1)
    end
  end
  table.sort(entries)
  return "E{" .. table.concat(entries, ";") .. "}"
end

local function function_fingerprint(f, st, depth)
  local ok, code = pcall(string.dump, f, true)
  if not ok then uncacheable("it closes over a C function the engine cannot name") end
  local parts = { "F", core.sha256(code) }
  local i = 1
  while true do
    local name, value = debug.getupvalue(f, i)
    if name == nil then break end
    parts[#parts + 1] = "U" .. name .. ":" .. fingerprint(value, st, depth + 1)
    i = i + 1
  end
  return table.concat(parts)
end

local SCALARS = {
  ["nil"] = function() return "nil" end,
  boolean = function(v) return v and "true" or "false" end,
  number = function(v) return math.type(v) == "integer" and ("i" .. v) or ("f" .. string.format("%a", v)) end,
  string = function(v) return "s" .. #v .. ":" .. v end,
}

-- A canonical text of v: equal for values that behave the same.
function fingerprint(v, st, depth)
  local scalar = SCALARS[type(v)]
  if scalar then return scalar(v) end
  if depth > 100 then uncacheable("a value it closes over is nested too deep") end
  local name = st.known[v] or (type(v) == "table" and env.is_os(v) and "lib:os") or nil
  if name then
    local module = name:match("^mod:([^.]*)$")
    if module and M.project_module_file(module) then st.modules[module] = true end
    return name
  end
  if st.seen[v] then return "R" .. st.seen[v] end
  st.count = st.count + 1
  st.seen[v] = st.count
  if type(v) == "function" then return function_fingerprint(v, st, depth) end
  if type(v) == "table" then
    if env.is_env(v) then return env_fingerprint(v, st, depth) end
    return table_fingerprint(v, st, depth)
  end
  uncacheable(("it closes over a %s (%s), which cannot be hashed"):format(type(v), tostring(v)))
end

local function new_state(known)
  return { known = known, seen = {}, count = 0, modules = {} }
end

--- The digest of a value (a parameter, a return value...).
function M.digest(v, known)
  return core.sha256(fingerprint(v, new_state(known or M.known_values()), 0))
end

-- ===== The parts ============================================================

local function code_parts(run, parts, st)
  parts.code = core.sha256((string.dump(run, true)))
  local i = 1
  while true do
    local name, value = debug.getupvalue(run, i)
    if name == nil then break end
    local part = name == "_ENV" and "globals" or ("upvalue " .. name)
    parts[part] = core.sha256(fingerprint(value, st, 1))
    i = i + 1
  end
end

local function named_parts(prefix, t, parts, st, skip)
  for k, v in pairs(t or {}) do
    if not (skip and skip[k]) then parts[prefix .. tostring(k)] = core.sha256(fingerprint(v, st, 1)) end
  end
end

--[[
The dynamic parts now, for these part names ("param mode", "module
projlib"): what each parameter's value and each module's source is in
this run. `c` has params, secret_params and known; memo caches module
digests. A secret parameter the step read is named, its value left out.
]]
function M.dynamic_now(names, c, memo)
  local out = {}
  for name in pairs(names) do
    local kind, what = name:match("^(%a+) (.*)$")
    if kind == "module" then
      out[name] = module_digest(what, memo)
    elseif kind == "param" and c.secret_params[what] then
      out[name] = "secret"
    elseif kind == "param" then
      local v = c.params[what]
      out[name] = v == nil and "absent" or core.sha256(fingerprint(v, new_state(c.known), 1))
    end
  end
  return out
end

--- The dynamic part names of a run: the parameters read and the modules.
function M.dynamic_names(params_read, modules)
  local names = {}
  for k in pairs(params_read) do names["param " .. tostring(k)] = true end
  for name in pairs(modules) do names["module " .. name] = true end
  return names
end

local function profile_text(spec)
  local p = spec.profile or "auto/default"
  if type(p) == "table" then return tostring(p.provider) .. "/" .. tostring(p.name) end
  return tostring(p)
end

-- The provider program: its path (or argv) and the digest of the executable.
local function provider_identity(spec, memo)
  local program = spec.program or os.getenv("SMOLWF_PROVIDER") or core.bundled_provider() or "?"
  local text = type(program) == "table" and table.concat(program, "\0") or tostring(program)
  if memo[text] == nil then
    local file = type(program) == "table" and program[1] or program
    memo[text] = core.sha256(text, "\0", core.sha256_file(file) or "no file")
  end
  return memo[text]
end

--[[
The static parts of an instance's key. `c` has: run (the step's function),
params and secret_params (set; for dynamic_now), matrix, env, secret_names (set), spec (the
session spec), base (the host directory inputs are relative to), inputs
and outputs (lists of patterns), needs ({id = key or value}), known
(known_values), memo (a per-run table). Returns parts, the project modules
its values name, and the input files (hash_files is given `hash`, a
function(paths) -> digests that may wait). Raises Uncacheable.
]]
function M.static_parts(c, hash)
  local st = new_state(c.known)
  local parts = { engine = "smolwf " .. tostring(core.version) .. " cache " .. M.VERSION }
  code_parts(c.run, parts, st)
  named_parts("matrix ", c.matrix, parts, st)
  named_parts("env ", c.env, parts, st, c.secret_names)
  local names = {}
  for name in pairs(c.secret_names or {}) do names[#names + 1] = name end
  table.sort(names)
  parts.secrets = core.sha256(table.concat(names, "\0"))
  parts.profile = core.sha256(profile_text(c.spec))
  parts.provider = provider_identity(c.spec, c.memo.providers)
  parts.inputs = core.sha256(fingerprint(c.inputs, st, 1))
  parts.outputs = core.sha256(fingerprint(c.outputs, st, 1))
  for id, v in pairs(c.needs) do parts["need " .. id] = core.sha256(fingerprint(v, st, 1)) end
  local files = glob.host_files(c.base, c.inputs)
  for _, path in ipairs(files.missing) do parts["input " .. path] = "missing" end
  local full = {}
  for i, path in ipairs(files.paths) do full[i] = c.base .. "/" .. path end
  local digests = hash(full)
  for i, path in ipairs(files.paths) do
    if not digests[i] then error(("cannot hash the input `%s`: %s"):format(path, digests.errors[i]), 0) end
    parts["input " .. path] = digests[i]
  end
  return parts, st.modules
end

function M.is_uncacheable(err)
  return getmetatable(err) == Uncacheable
end

--- The key: one digest over the sorted parts.
function M.key_of(parts)
  local names = {}
  for name in pairs(parts) do names[#names + 1] = name end
  table.sort(names)
  local lines = {}
  for i, name in ipairs(names) do lines[i] = name .. "\0" .. parts[name] .. "\n" end
  return core.sha256(table.concat(lines))
end

--[[
What differs between two sets of parts, exactly: {"changed: input src/a.c",
"added: param mode", "removed: upvalue flags"}, sorted; {} when equal.
]]
function M.diff(old, new)
  local out = {}
  for name, digest in pairs(new) do
    if old[name] == nil then out[#out + 1] = "added: " .. name
    elseif old[name] ~= digest then out[#out + 1] = "changed: " .. name end
  end
  for name in pairs(old) do
    if new[name] == nil then out[#out + 1] = "removed: " .. name end
  end
  table.sort(out)
  return out
end

return M
