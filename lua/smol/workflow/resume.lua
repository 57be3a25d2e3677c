--[[
Re-running what failed: `smolwf run --resume [REPORT_DIR]`. Every run
leaves REPORT_DIR/resume.json: each instance's status, its return value
as Lua text (smol.workflow.luavalue) and its step-cache key. A resumed run
reuses the instances that succeeded there: their return values, and their
declared outputs, put back into the session from the step cache. It runs
again what failed, was cancelled or skipped, what depends on those, and
what cannot be reused: a value that cannot be kept or that holds a secret
(resume.json is not masked, so such a value is not written), outputs no
longer in the cache. Files a reused step left in its session without
declaring them as outputs are not there: a resumed run starts from the
workspace again.
]]
local lfs = require "lfs"
local cjson = require "cjson"
local fs = require "smol.fs"
local luavalue = require "smol.workflow.luavalue"
local reportdir = require "smol.workflow.reportdir"

local M = {}

M.FILE = "resume.json"

local Setup = { __tostring = function(e) return e.message end }
local function refuse(fmt, ...)
  error(setmetatable({ code = "setup", message = fmt:format(...) }, Setup), 0)
end

local function read_state(dir)
  local text = fs.try_read_file(dir .. "/" .. M.FILE)
  if not text then return nil end
  local ok, state = pcall(cjson.decode, text)
  if ok and type(state) == "table" and type(state.instances) == "table" then return state end
end

--- The latest run of the workflow `name` under `runs` (the default report
--- root's runs/), by the time it started; nil when there is none.
function M.latest(runs, name)
  if lfs.attributes(runs, "mode") ~= "directory" then return nil end
  local best, best_at
  for entry in lfs.dir(runs) do
    local dir = runs .. "/" .. entry
    local state = entry:sub(1, 1) ~= "." and read_state(dir)
    if state and state.name == name and (not best_at or (tonumber(state.started_at) or 0) > best_at) then
      best, best_at = dir, tonumber(state.started_at) or 0
    end
  end
  return best
end

--- The state of the run in `dir`; a setup error when it has none.
function M.load(dir)
  local state = read_state(dir)
  if not state then refuse("--resume %s: not the report directory of a run (no %s)", dir, M.FILE) end
  return state
end

--[[
What a run of `instances` reuses from `state`: {[id] = {value = text,
key = cache key or nil}} for the instances that succeeded there (with a
kept value) and depend on nothing that runs again. `cached_outputs(id,
key)` says whether an instance's declared outputs can be put back.
]]
function M.plan(instances, state, cached_outputs)
  local reuse = {}
  for _, inst in ipairs(instances) do   -- topological order: needs come first
    local old = state.instances[inst.id]
    local ok = type(old) == "table" and old.status == "success" and type(old.value) == "string"
    for _, need in ipairs(inst.needs) do ok = ok and reuse[need] ~= nil end
    local key = ok and type(old.cache_key) == "string" and old.cache_key or nil
    if ok and not cached_outputs(inst, key) then ok = false end
    if ok then reuse[inst.id] = { value = old.value, key = key } end
  end
  return reuse
end

--- The reused value, exactly as the step returned it.
function M.value(record)
  return luavalue.decode(record.value)
end

--[[
Writes run.report_dir/resume.json: each instance's status, its return
value (inst.value) when it can be kept and holds no secret (`masker`
would change it), and its cache key.
]]
function M.write(run, masker)
  local instances = {}
  for _, inst in ipairs(run.instances or {}) do
    local text = inst.status == "success" and luavalue.encode(inst.value) or nil
    if text and masker and masker:text(text) ~= text then text = nil end
    instances[inst.id] = { status = inst.status, value = text,
      cache_key = type(inst.cache) == "table" and inst.cache.key or nil }
  end
  local state = { name = run.name, started_at = run.started_at, instances = instances }
  return reportdir.write_report(run, M.FILE, cjson.encode(state) .. "\n")
end

return M
