--[[
The step cache for one instance: before its attempts, the static part of
its key is computed (smol.workflow.cache_key) and the results stored
under it looked at: one whose dynamic parts (the parameters the step
read, the project modules loaded) are the same now is a hit, whose
outputs are put back into the instance's session and whose return value
is the step's; the step does not run. After a successful run, the
outputs and the value are stored. A step is cached when it declares
`inputs` or `outputs` (or says cache = true), unless it says cache = false.

inst.cache says what happened, for the reports:
  {status = "hit" | "miss" | "uncacheable", key (the result's), changed =
   {...} (why it ran, exactly), reason, stored (true once stored), note
   (why it was not stored)}
and S.on_explain(inst, lines) hears it for the steps --explain names.
]]
local task = require "smol.task"
local core = require "smol.core"
local cache_key = require "smol.workflow.cache_key"
local luavalue = require "smol.workflow.luavalue"

local M = {}

local function list(v)
  if v == nil then return {} end
  if type(v) == "string" then return { v } end
  return v
end
-- A step's `inputs` or `outputs` as a list (a single pattern may be a string).
M.list = list

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

local function dynamic_now(S, c, names)
  return cache_key.dynamic_now(names or {}, c, S.cache_memo.modules)
end

-- The stored result whose dynamic parts are the same now, or nil.
local function matching_variant(S, c, static_key)
  for _, v in ipairs(S.cache:variants(static_key)) do
    local now = dynamic_now(S, c, v.dynamic)
    if #cache_key.diff(v.dynamic or {}, now) == 0 then
      local entry = S.cache:lookup(v.key)
      if entry then return entry end
    end
  end
end

-- Why the step ran: which parts changed since its result was last
-- stored, exactly (static parts, then the dynamic ones it had then).
local function miss_reasons(S, c, last, parts)
  if not S.cache_read then return { "--no-cache" } end
  if not last then return { "no result of this step was stored before" } end
  local changed = cache_key.diff(last.parts or {}, parts)
  if #changed == 0 then changed = cache_key.diff(last.dynamic or {}, dynamic_now(S, c, last.dynamic)) end
  if #changed == 0 then
    return { ("the result %s is not in the cache any more (evicted or removed)"):format(short(last.key)) }
  end
  return changed
end

local function explain(S, inst, lines)
  if S.on_explain and S.explain and (S.explain[inst.step] or S.explain[inst.id]) then S.on_explain(inst, lines) end
end

-- Why an instance the cache does not look at ran (for --explain).
function M.explain_uncached(S, inst)
  if not S.explain then return end
  local def = S.defs[inst.id]
  local why = S.cache_off and "not cached: the step cache is off for this run"
    or def.cache == false and "not cached: the step says cache = false"
    or "not cached: the step declares no inputs or outputs (nor cache = true)"
  explain(S, inst, { why })
end

local function hit(S, inst, b, entry)
  local session = b:session()
  S.made_dirs = S.made_dirs or setmetatable({}, { __mode = "k" })
  S.made_dirs[session] = S.made_dirs[session] or {}
  local value = S.cache:restore(entry, session, S.made_dirs[session])
  S.cache:touch(entry.key)
  S.used_keys[entry.key], S.cache_keys[inst.id] = true, entry.key
  inst.cache = { status = "hit", key = entry.key }
  explain(S, inst, { ("cached: key %s, stored %s"):format(short(entry.key),
    os.date("%Y-%m-%d %H:%M:%S", math.floor(tonumber(entry.created_at) or 0))) })
  return { status = "success", value = value }
end

--[[
Looks the instance up. Returns the hit's outcome ({status = "success",
value}) or nil, and the state M.store needs after a run. `b` is the
instance's bridge (its session).
]]
function M.lookup(S, inst, b, env, spec)
  local c = key_input(S, inst, env, spec)
  local ok, parts, modules = pcall(cache_key.static_parts, c, hash)
  if not ok then
    if not cache_key.is_uncacheable(parts) then error(parts, 0) end
    inst.cache = { status = "uncacheable", reason = parts.why }
    explain(S, inst, { "not cacheable: " .. parts.why })
    return nil
  end
  local static_key = cache_key.key_of(parts)
  local entry = S.cache_read and matching_variant(S, c, static_key)
  if entry then return hit(S, inst, b, entry) end
  local last = S.cache:last(S.run.name, inst.id)
  local changed = miss_reasons(S, c, last, parts)
  inst.cache = { status = "miss", changed = changed, previous = last and last.key }
  explain(S, inst, { ("ran%s"):format(last and (": last stored " .. short(last.key)) or ""),
    "  " .. table.concat(changed, "\n  ") })
  return nil, { static_key = static_key, parts = parts, modules = modules, c = c }
end

-- The result's dynamic parts: the parameters read (params_read, a set)
-- and the project modules loaded now or named by its values.
local function dynamic_parts(S, state, params_read)
  local modules = cache_key.loaded_project_modules()
  for name in pairs(state.modules) do modules[name] = true end
  return dynamic_now(S, state.c, cache_key.dynamic_names(params_read, modules))
end

local function result_key(state, dynamic)
  local all = {}
  for k, v in pairs(state.parts) do all[k] = v end
  for k, v in pairs(dynamic) do all[k] = v end
  return cache_key.key_of(all)
end

--[[
Stores a successful run's outputs and value. Returns nil, or a failed
outcome when a declared output is not there (the step did not do what it
said). Other problems (a value that cannot be kept, a full disk) only
leave the result unstored, with inst.cache.note saying why.
]]
function M.store(S, inst, state, value, b, params_read)
  local text, why = luavalue.encode(value)
  -- The cache outlives the run (CI systems upload it): no secret in it.
  if text and S.masker and S.masker:text(text) ~= text then text, why = nil, "a secret" end
  if not text then
    inst.cache.note = "not stored: its return value holds " .. why
    return nil
  end
  local dynamic = dynamic_parts(S, state, params_read or {})
  local key = result_key(state, dynamic)
  local info = { parts = state.parts, dynamic = dynamic, step = inst.id, workflow = S.run.name }
  local ok, err = pcall(S.cache.store, S.cache, key, info, b:session(), list(S.defs[inst.id].outputs), text)
  if not ok then
    if type(err) == "table" and err.code == "missing_output" then return { status = "failed", message = err.message } end
    inst.cache.note = "not stored: " .. tostring(err)
    S.warn(("%s: the step cache could not store its result: %s"):format(inst.id, tostring(err)))
    return nil
  end
  S.cache:add_variant(state.static_key, { key = key, dynamic = dynamic })
  S.cache:set_last(S.run.name, inst.id, { key = key, parts = state.parts, dynamic = dynamic })
  S.used_keys[key], S.cache_keys[inst.id] = true, key
  inst.cache.key, inst.cache.stored = key, true
  return nil
end

return M
