-- The sandbox sessions of one run, opened lazily on first use and closed
-- when the run ends (or, for an instance's own session, when it ends).
-- Steps sharing a key share one session; concurrent first uses wait for a
-- single open instead of racing to open several.
--
-- An instance's own session may be made from another open session
-- instead (`from`): forked, where that session can fork (it announces the
-- `fork` capability and has a fork method), so it starts with that
-- session's files as they are; else opened afresh from the spec.
local task = require "smol.task"

local Sessions = {}
Sessions.__index = Sessions

local M = {}

-- `open` is sandbox.open or a stand-in taking the sandbox spec table (and,
-- on a pool, the provider to open on: `place`, see smol.workflow.placement).
function M.new(open)
  return setmetatable({ open = open, entries = {}, list = {}, infos = {} }, Sessions)
end

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

local function is_cancel(err)
  return type(err) == "table" and err.code == "cancelled"
end

-- What a session really is, from its capabilities: the profile asked for
-- (and the one the provider names, when it says), the isolation it
-- enforces ("namespaces", "none") and whether it has network.
local function describe(spec, session)
  local caps = type(session) == "table" and type(session.capabilities) == "table"
    and session.capabilities or {}
  local requested = spec.profile or "auto/default"
  if type(requested) == "table" then requested = tostring(requested.provider) .. "/" .. tostring(requested.name) end
  local given = type(session) == "table" and type(session.session) == "table" and session.session.profile
  local network = nil  -- unknown unless the session says
  if type(caps.network) == "boolean" then network = caps.network end
  return {
    profile = tostring(requested), provider_profile = type(given) == "string" and given or nil,
    isolation = type(caps.isolation) == "string" and caps.isolation or "unknown",
    network = network,
    program = type(session) == "table" and session.program or nil,
  }
end

-- The session opened for `key`, or nil (never opens one).
function Sessions:peek(key)
  local entry = self.entries[key]
  return entry and entry.session
end

-- The description of the session opened for `key` (nil if not open).
function Sessions:info(key)
  return self.infos[key]
end

-- The open session `key` can be forked from, or nil.
function Sessions:forkable(from)
  local entry = from and self.entries[from]
  local session = entry and entry.session
  if session and type(session.capabilities) == "table" and session.capabilities.fork
      and type(session.fork) == "function" then
    return session
  end
end

function Sessions:open_entry(key, spec, from, on_progress, place)
  local entry = { ready = task.event() }
  self.entries[key] = entry
  local parent = self:forkable(from)
  local ok, result
  if parent then ok, result = pcall(parent.fork, parent)
  else
    local open_spec = copy(spec)
    open_spec.on_progress = on_progress
    ok, result = pcall(self.open, open_spec, place)
  end
  if ok then
    entry.session = result
    self.list[#self.list + 1] = result
    self.infos[key] = describe(spec or {}, result)
    self.infos[key].forked_from = parent and from or nil
    if self.on_open then self.on_open(result, key, self.infos[key]) end
  elseif is_cancel(result) then
    -- The step that was opening it was cancelled: forget the attempt so the
    -- next user opens afresh, and pass the cancellation on.
    self.entries[key] = nil
  else
    entry.err = result
  end
  entry.ready:set()
  if not ok then error(result, 0) end
  return result
end

-- Returns the session for `key`, opening it from `spec` (or forking the
-- session `from`, see above) the first time; on_progress(ev), if given, sees the open's progress
-- events; `place`: the provider to open on (on a pool). A failed open is remembered:
-- every step using that session fails with it.
function Sessions:get(key, spec, from, on_progress, place)
  while true do
    local entry = self.entries[key]
    if not entry then return self:open_entry(key, spec, from, on_progress, place) end
    entry.ready:wait()
    if entry.session then return entry.session end
    if entry.err then error(entry.err, 0) end
  end
end

-- Closes the session `key` if it was opened (an instance's own, when the
-- instance ends); returns the error message of a failed close, or nil.
function Sessions:close(key)
  local entry = self.entries[key]
  self.entries[key] = nil
  if not (entry and entry.session) then return nil end
  for i, s in ipairs(self.list) do
    if s == entry.session then table.remove(self.list, i); break end
  end
  local ok, err = pcall(entry.session.close, entry.session)
  if not ok then return tostring(err) end
end

-- Closes every session opened so far; errors on close are collected, not raised,
-- so that one failing close does not leave the others open.
function Sessions:close_all()
  local errors = {}
  for _, session in ipairs(self.list) do
    local ok, err = pcall(session.close, session)
    if not ok then errors[#errors + 1] = tostring(err) end
  end
  self.list = {}
  self.entries = {}
  return errors
end

return M
