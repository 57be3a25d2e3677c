--[[
smol.workflow.placement: the steps of a workflow whose sandbox names a
pool (sandbox = {profile =, workspace =, pool = {...}}, smol.pool), each
placed on one of its providers.

- An instance takes a slot of the least-loaded provider before it runs
  (its `when` included) and gives it back when it has ended:
  inst.placement = {provider = N, node = NAME}. The workflow's shared
  session is one per provider (key "workflow@N"); a step's own session
  opens on the step's provider.
- Files follow the steps: before the step's code runs, the declared
  `outputs` of every step it needs (directly or through others) that ran
  on another provider are moved into its session, once per session; when
  that provider was lost, they come from the step cache, which stored them
  when the step succeeded (unless the cache is off: cache = false).
- A lost provider is not a step failure: an attempt that failed while its
  provider was lost ends the attempts there (no `retry` is used on it), and
  the instance runs again on another provider, at most `infra_retries`
  times (the pool table's field, default 2); inst.infra_retries counts
  them and the lost attempts say why (record.lost).
- A step that fails on a file that a step it needs made on another
  provider, undeclared, gets an error naming that step and saying to
  declare the file in its `outputs`.
What moved into an instance's session is in inst.moved_in: {{step, from
(the provider), entries, bytes, via ("archive", "files" or "cache")}}.
]]
local task = require "smol.task"
local errors = require "smol.errors"
local observe = require "smol.workflow.observe"
local glob = require("smol.lazy")("smol.workflow.glob")   -- only where outputs move
local text = require "smol.workflow.text"
local step_cache = require("smol.lazy")("smol.workflow.step_cache")

local M = {}

M.DEFAULT_INFRA_RETRIES = 2
-- Seconds a provider gets to answer `describe` when a step on it failed:
-- a provider on its way out fails it at once, a busy one answers.
local PING_TIMEOUT = 5

--[[ The pool of a run ]]

local function snapshot(pool)
  local out = {}
  for i, p in ipairs(pool:providers()) do
    out[i] = { index = p.index, node = p.node, slots = p.slots, busy = p.busy, alive = p.alive, lost = p.lost }
  end
  return out
end

--[[
Starts the pool the workflow's sandbox names (S.sandbox loses its `pool`
field: the rest are each session's options). run.pool lists the
providers as they stand (kept current), observers hear pool_started(run,
providers) (before the first step is placed) and pool_changed(run, what, provider, providers) (what:
"busy" or "lost"), step_placed(run, inst, placement) as an instance takes
its slot and step_moved(run, inst, why) before it runs again elsewhere. A pool that
cannot start raises a `setup` error naming why.
]]
function M.start(S, open_pool)
  local spec = S.sandbox
  if type(spec) ~= "table" or spec.pool == nil then return end
  local rest, opts = {}, {}
  for k, v in pairs(spec) do if k ~= "pool" then rest[k] = v end end
  for k, v in pairs(spec.pool) do if k ~= "infra_retries" then opts[k] = v end end
  S.sandbox, S.infra_limit = rest, spec.pool.infra_retries or M.DEFAULT_INFRA_RETRIES
  local ok, pool = pcall(open_pool or require("smol.sandbox").pool, opts)
  if not ok then
    local why = errors.is(pool) and pool.message or tostring(pool)
    error(setmetatable({ code = "setup", message = "cannot start the pool of providers: " .. why, cause = pool },
      { __tostring = function(e) return e.message end }), 0)
  end
  S.pool, S.placed, S.ran_on, S.delivered = pool, {}, {}, setmetatable({}, { __mode = "k" })
  S.run.pool = { providers = snapshot(pool), allocation = pool.allocation and pool.allocation.job_id or nil }
  pool:watch(function(what, member)
    if S.pool_closed then return end
    -- (twice per step: only the provider that changed is described again)
    local info = pool.info(member)
    S.run.pool.providers[member.index] = { index = info.index, node = info.node, slots = info.slots,
      busy = info.busy, alive = info.alive, lost = info.lost }
    observe.notify(S, "pool_changed", what, S.run.pool.providers[member.index], S.run.pool.providers)
  end)
end

-- Observers hear of the pool after run_started, before the first placement.
local function announce(S)
  if S.pool_announced then return end
  S.pool_announced = true
  observe.notify(S, "pool_started", S.run.pool.providers)
end

-- Closes the run's pool (its sessions, its providers, an allocation made for it).
function M.stop(S)
  if not S.pool or S.pool_closed then return end
  S.run.pool.providers = snapshot(S.pool)
  S.pool_closed = true
  local ok, err = pcall(S.pool.close, S.pool)
  if not ok then S.warn("closing the pool failed: " .. tostring(err)) end
end

-- sessions.new's opener: a session on the instance's provider.
function M.opener(S, open)
  if not S.pool then return open end
  return function(spec, member) return S.pool:open_on(member, spec) end
end

-- The key of the workflow's shared session for this instance.
function M.shared_key(S, inst)
  local member = S.placed and S.placed[inst]
  if not member then return "workflow" end
  return "workflow@" .. member.index
end

-- The provider the instance runs on (nil without a pool).
function M.member(S, inst)
  return S.placed and S.placed[inst]
end

--[[ Files that follow the steps ]]

-- The instances inst needs, directly or through others, nearest first.
local function ancestors(S, inst)
  local out, seen, queue, i = {}, {}, { inst }, 1
  while i <= #queue do
    for _, id in ipairs(queue[i].needs) do
      if not seen[id] then
        seen[id] = true
        local need = S.by_id[id]
        out[#out + 1], queue[#queue + 1] = need, need
      end
    end
    i = i + 1
  end
  return out
end

-- Where a producer ran and the session it left its files in (a shared one), or nil.
local function source_of(S, producer)
  local where = S.ran_on[producer.id]
  if not where or not where.shared then return nil end
  return where, S.sessions:peek(where.key)
end

local function name_of(S, member)
  local p = S.pool:providers()[member.index]
  return ("provider %d (%s)"):format(p.index, p.node or p.label)
end

-- The outputs of a producer whose provider was lost, put back into
-- `target` from the step cache (which stored them when it succeeded).
local function restore_outputs(S, producer, where, target)
  local key = S.cache_keys[producer.id]
  local entry = key and S.cache and S.cache:lookup(key)
  if not entry then
    errors.raise{ code = "provider_exited", lost = true, message = ("the outputs of step '%s' were on %s, which was "
      .. "lost, and the step cache does not hold them"):format(producer.id, where.member.lost or name_of(S, where.member)) }
  end
  S.cache:restore(entry, target)
  local bytes = 0
  for _, f in ipairs(entry.files or {}) do bytes = bytes + (tonumber(f.size) or 0) end
  return { entries = #(entry.files or {}) + #(entry.dirs or {}), bytes = bytes, via = "cache" }
end

-- Moves producer's declared outputs from its session into `target`, the session of `inst`.
local function move_outputs(S, inst, producer, where, source, target)
  local r
  if not where.member.alive then
    r = restore_outputs(S, producer, where, target)
  else
    local found = glob.session_paths(source, step_cache.list(S.defs[producer.id].outputs))
    if #found.missing > 0 then
      errors.raise{ code = "not_found", message = ("the declared output `%s` of step '%s' is not in its session on %s")
        :format(found.missing[1], producer.id, name_of(S, where.member)) }
    end
    r = require("smol.pool.files").move(source, found.paths, target)
  end
  inst.moved_in = inst.moved_in or {}
  table.insert(inst.moved_in, { step = producer.id, from = where.member.index, entries = r.entries,
    bytes = r.bytes, via = r.via })
  return r
end

-- Once per target session and producer: concurrent consumers wait for one move.
local function deliver_one(S, inst, producer, target)
  local done = S.delivered[target] or {}
  S.delivered[target] = done
  local entry = done[producer.id]
  if entry then
    entry.ready:wait()
    if entry.err then error(entry.err, 0) end
    return
  end
  entry = { ready = task.event() }
  done[producer.id] = entry
  local where, source = source_of(S, producer)
  local ok, err = pcall(move_outputs, S, inst, producer, where, source, target)
  if not ok then entry.err, done[producer.id] = err, nil end
  entry.ready:set()
  if not ok then error(err, 0) end
end

--[[
Moves into the instance's session the outputs of what it needs that ran
on another provider. `session` opens the instance's session (only when
there is something to move).
]]
function M.deliver(S, inst, session)
  local member = S.placed[inst]
  local target
  for _, producer in ipairs(ancestors(S, inst)) do
    local where = S.ran_on[producer.id]
    if where and where.shared and where.member ~= member and S.defs[producer.id].outputs ~= nil then
      target = target or session()
      deliver_one(S, inst, producer, target)
    end
  end
end

--[[ Undeclared files ]]

-- Paths a failure may be about: a file operation's path, or what a
-- command's stderr says is missing.
local function missing_paths(err)
  local paths = {}
  if type(err) ~= "table" then return paths end
  if err.code == "not_found" and type(err.path) == "string" then paths[#paths + 1] = err.path end
  local stderr = type(err.stderr) == "string" and err.stderr or ""
  for p in stderr:gmatch("([^%s:'\"`]+): No such file or directory") do paths[#paths + 1] = p end
  for p in stderr:gmatch("[%s:]([^%s:'\"`]+): not found") do paths[#paths + 1] = p end
  for p in stderr:gmatch("can't open '([^']+)'") do paths[#paths + 1] = p end
  return paths
end

local function exists_in(session, path)
  if path:sub(1, 1) == "/" then return false end
  local ok = pcall(session.stat, session, path)
  return ok
end

--[[
For a failed outcome of a placed instance: when a path it could not find
exists in the shared session of another provider where a step it needs
ran, the message says so first.
]]
function M.explain_missing(S, inst, outcome)
  local member = S.placed and S.placed[inst]
  if not member or outcome.status ~= "failed" then return end
  for _, path in ipairs(missing_paths(outcome.error)) do
    for _, producer in ipairs(ancestors(S, inst)) do
      local where, source = source_of(S, producer)
      if where and where.member ~= member and where.member.alive and source and exists_in(source, path) then
        outcome.message = ("`%s` is not in this step's session on %s: step '%s' made it on %s without declaring it; "
          .. "declare it in the `outputs` of '%s' so that it follows the steps\n%s"):format(path, name_of(S, member),
          producer.id, name_of(S, where.member), producer.step, outcome.message or "")
        return
      end
    end
  end
end

--[[ Lost providers ]]

-- True when the instance's provider is lost (asked once more when it
-- still looks alive: a provider going down may fail a step first).
function M.lost(S, inst)
  local member = S.placed and S.placed[inst]
  if not member then return false end
  if member.alive and member.conn:alive() then
    pcall(member.conn.request, member.conn, "describe", {}, nil, { timeout = PING_TIMEOUT })
  end
  S.pool:refresh()
  return not member.alive
end

-- In the attempts loop: an attempt that failed on a lost provider ends
-- the attempts there; its record says why.
function M.lost_during(S, inst, outcome, record)
  if outcome.status ~= "failed" or not M.lost(S, inst) then return false end
  outcome.lost = S.placed[inst].lost
  if record then record.lost = outcome.lost end
  return true
end

--[[ Running placed ]]

local function place(S, inst, member)
  S.placed[inst] = member
  inst.placement = { provider = member.index, node = member.node }
end

-- Moves what the instance needs into its session; nil, or the failed
-- outcome (cancelled when the instance was).
local function delivery_outcome(S, inst, on)
  local ok, err = on.in_own_task(M.deliver, S, inst, on.session)
  if ok then return nil end
  if type(err) == "table" and err.code == "cancelled" then return { status = "cancelled", message = err.message } end
  return { status = "failed", error = err,
    message = "could not bring the outputs of the steps it needs into its session: " .. text.message(err) }
end

--[[
Runs on.outcome() (the instance's whole outcome: its condition, attempts,
cache) placed on a provider, and returns it, or the outcome of a
placement that failed. The instance's side (smol.workflow.attempt):
  on.in_own_task(fn, ...)  runs fn where a cancel of the instance reaches it
  on.session()             opens (or gives) the instance's session
  on.session_key()         the key of that session
]]
function M.run(S, inst, on)
  if not S.pool then return on.outcome() end
  announce(S)
  inst.infra_retries = 0
  while true do
    local ok, member = on.in_own_task(S.pool.acquire, S.pool)
    if not ok then
      if type(member) == "table" and member.code == "cancelled" then return { status = "cancelled", message = member.message } end
      return { status = "failed", message = errors.is(member) and member.message or text.message(member), error = member }
    end
    place(S, inst, member)
    observe.notify(S, "step_placed", inst, inst.placement)
    local outcome = delivery_outcome(S, inst, on) or on.outcome()
    S.pool:release(member)
    if outcome.status == "success" then
      local key = M.shared_key(S, inst)
      S.ran_on[inst.id] = { member = member, key = key, shared = on.session_key() == key }
    end
    local lost = outcome.lost or (outcome.status == "failed" and M.lost(S, inst) and member.lost)
    if not lost then return outcome end
    if inst.infra_retries >= S.infra_limit then
      outcome.message = ("%s (run again on another provider %d time(s), the limit: infra_retries = %d)\n%s")
        :format(lost, inst.infra_retries, S.infra_limit, outcome.message or "")
      return outcome
    end
    inst.infra_retries = inst.infra_retries + 1
    observe.notify(S, "step_moved", inst, lost)
  end
end

return M
