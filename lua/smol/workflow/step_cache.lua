--[[
The step cache for one instance: before its attempts, the key is computed
(smol.workflow.cache_key) and a stored result looked up; a hit puts the
outputs back into the instance's session and gives its return value, and
the step does not run. After a successful run, the outputs and the value
are stored. A step is cached when it declares `inputs` or `outputs` (or
says cache = true), unless it says cache = false.

inst.cache says what happened, for the reports:
  {status = "hit" | "miss" | "uncacheable" | "off", key, changed = {...},
   reason, stored (true once stored), note (why it was not stored)}
and S.on_explain(inst, lines) hears it for the steps --explain names.
]]
local task = require "smol.task"
local core = require "smol.core"
local cache_key = require "smol.workflow.cache_key"
local luavalue = require "smol.workflow.luavalue"

local M = {}

function M.enabled(S, def)
  if not S.cache or def.cache == false then return false end
  return def.inputs ~= nil or def.outputs ~= nil or def.cache == true
end

local function list(v)
  if v == nil then return {} end
  if type(v) == "string" then return { v } end
  return v
end

-- hash_files, waiting in the task (the files are hashed off the loop).
local function hash(paths)
  if #paths == 0 then return { errors = {} } end
  local done = task.event()
  core.hash_files(paths, function(digests) done:set(digests) end)
  return done:wait()
end

local function needs_of(S, inst)
  local out = {}
  for _, id in ipairs(inst.needs) do out[id] = S.cache_keys[id] or S.outputs[id] end
  return out
end

-- What the key of `inst` is made of (see cache_key.static_parts).
local function key_input(S, inst, env, spec)
  local def = S.defs[inst.id]
  S.cache_memo = S.cache_memo or { providers = {}, modules = {} }
  S.cache_known = S.cache_known or cache_key.known_values()
  return { run = def.run, params = S.params, secret_params = S.secret_params, matrix = inst.matrix,
    env = env, secret_names = S.secrets, spec = spec, base = spec.workspace or ".",
    inputs = list(def.inputs), outputs = list(def.outputs), needs = needs_of(S, inst),
    known = S.cache_known, memo = S.cache_memo }
end

local function short(key)
  return key and key:sub(1, 12) or "?"
end

-- Why the entry for `key` was not used: which parts changed since the
-- step's result was last stored, exactly.
local function miss_reasons(S, last, parts, key, entry, stale_modules)
  if not S.cache_read then return { "--no-cache" } end
  if stale_modules then return stale_modules end
  if not last then return { "no result of this step was stored before" } end
  local changed = cache_key.diff(last.parts or {}, parts)
  if #changed == 0 then
    local modules = cache_key.module_digests(last.modules or {}, S.cache_memo.modules)
    for name, digest in pairs(modules) do
      if (last.modules or {})[name] ~= digest then changed[#changed + 1] = "changed: module " .. name end
    end
    table.sort(changed)
  end
  if #changed == 0 and not entry then
    return { ("the entry %s is not in the cache any more (evicted or removed)"):format(short(key)) }
  end
  return changed
end

-- The modules whose sources changed since the entry was stored, or nil.
local function stale_modules(S, entry)
  local now = cache_key.module_digests(entry.modules or {}, S.cache_memo.modules)
  local stale = {}
  for name, digest in pairs(now) do
    if entry.modules[name] ~= digest then stale[#stale + 1] = "changed: module " .. name end
  end
  table.sort(stale)
  return #stale > 0 and stale or nil
end

local function explain(S, inst, lines)
  if S.on_explain and S.explain and (S.explain[inst.step] or S.explain[inst.id]) then S.on_explain(inst, lines) end
end

--[[
Looks the instance up. Returns the hit's outcome ({status = "success",
value}) or nil, and the state M.store needs after a run. `b` is the
instance's bridge (its session).
]]
function M.lookup(S, inst, b, env, spec)
  local ok, parts, modules = pcall(cache_key.static_parts, key_input(S, inst, env, spec), hash)
  if not ok then
    if not cache_key.is_uncacheable(parts) then error(parts, 0) end
    inst.cache = { status = "uncacheable", reason = parts.why }
    explain(S, inst, { "not cacheable: " .. parts.why })
    return nil
  end
  local key = cache_key.key_of(parts)
  S.cache_keys[inst.id] = key
  local entry = S.cache:lookup(key)
  local stale = entry and stale_modules(S, entry)
  if entry and S.cache_read and not stale then
    local session = b.session()
    S.made_dirs = S.made_dirs or setmetatable({}, { __mode = "k" })
    S.made_dirs[session] = S.made_dirs[session] or {}
    local value = S.cache:restore(entry, session, S.made_dirs[session])
    S.cache:touch(key)
    S.used_keys[key] = true
    inst.cache = { status = "hit", key = key }
    explain(S, inst, { ("cached: key %s, stored %s"):format(short(key),
      os.date("%Y-%m-%d %H:%M:%S", math.floor(tonumber(entry.created_at) or 0))) })
    return { status = "success", value = value }
  end
  local last = S.cache:last(S.run.name, inst.id)
  local changed = miss_reasons(S, last, parts, key, entry, stale)
  inst.cache = { status = "miss", key = key, changed = changed, previous = last and last.key }
  explain(S, inst, { ("ran: key %s%s"):format(short(key), last and (", last stored " .. short(last.key)) or ""),
    "  " .. table.concat(changed, "\n  ") })
  return nil, { key = key, parts = parts, modules = modules }
end

--[[
Stores a successful run's outputs and value. Returns nil, or a failed
outcome when a declared output is not there (the step did not do what it
said). Other problems (a value that cannot be kept, a full disk) only
leave the result unstored, with inst.cache.note saying why.
]]
function M.store(S, inst, state, value, b)
  local def = S.defs[inst.id]
  local text, why = luavalue.encode(value)
  if not text then
    inst.cache.note = "not stored: its return value holds " .. why
    return nil
  end
  local modules = cache_key.loaded_project_modules()
  for name in pairs(state.modules) do modules[name] = true end
  local info = { parts = state.parts, modules = cache_key.module_digests(modules, S.cache_memo.modules),
    step = inst.id, workflow = S.run.name }
  local ok, err = pcall(S.cache.store, S.cache, state.key, info, b.session(), list(def.outputs), text)
  if not ok then
    if type(err) == "table" and err.code == "missing_output" then return { status = "failed", message = err.message } end
    inst.cache.note = "not stored: " .. tostring(err)
    S.warn(("%s: the step cache could not store its result: %s"):format(inst.id, tostring(err)))
    return nil
  end
  S.cache:set_last(S.run.name, inst.id, { key = state.key, parts = state.parts, modules = info.modules })
  S.used_keys[state.key] = true
  inst.cache.stored = true
  return nil
end

return M
