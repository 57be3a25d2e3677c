--[[
smol.pool: several providers, and each session placed on the least-loaded.

  local pool = sandbox.pool{
    programs = {{"ssh", "box1", "smolwf-provider"}, {"ssh", "box2", "smolwf-provider", slots = 8}},
    -- or: slurm = {nodes =, partition =, time =, cpus_per_node =, args =, job =, program =, srun_args =}
    slots = N,             -- every provider's slots (default: its node's CPU count)
    start_timeout = 120,   -- seconds every provider gets to serve
    profile = "auto/default",  -- the profile a launcher member's probe session uses
  }
  local sb = pool:open{profile =, workspace =, ...}   -- sandbox.open's options
  pool:placement(sb)       -- {provider = N, node = "NAME"}
  pool:providers()         -- {{index, node, slots, busy, alive, lost, label, pid}, ...}
  local m = pool:acquire() -- a provider with a free slot (waits for one); pool:release(m)
  pool:open_on(m, opts)    -- a session on that provider, holding no slot
  pool:watch(fn)           -- fn(what, provider): "busy" (its load changed), "lost"
  pool:close()             -- every session, every provider, the allocation made here

Load is the slots a provider's sessions and acquirers hold: a session
opened by pool:open holds one until it is closed, an acquire one until its
release. pool:open takes the least-loaded provider (busy / slots) even
when every slot is taken (a session may sit idle); pool:acquire waits for
a free slot. Ties go to the lowest index, so sessions opened at once
spread over the providers.

A provider whose process ended (its srun ended: the node failed, its job
step was killed; the launcher's connection dropped) is lost: seen at the
next placement, it is never chosen again, and watchers hear "lost" with
its reason (pool:providers()[i].lost). A lost provider is not replaced: a
node lost from an allocation cannot be re-placed without a new
allocation, which the scheduler may grant only much later, and a launcher
that failed most likely failed for a reason (the machine is down) a
restart would meet again. When none is left, placement raises an error
with code "pool_lost" naming every provider lost and why.

Every end of the run (normal, error, Ctrl-C, SIGTERM) closes the pools
still open, before an allocation made here is released (smol.slurm).
]]

local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local launch = require "smol.pool.launch"

local pool = {
  lost_poll = 1,   -- seconds between checks for lost providers while an acquire waits
}

local Pool = {}
Pool.__index = Pool
Pool.__name = "smol.pool"

local open_pools = {}
local exit_hook_registered = false

--[[ The end of the run ]]

local function close_all()
  local list = {}
  for p in pairs(open_pools) do list[#list + 1] = p end
  for _, p in ipairs(list) do
    local ok, err = pcall(p.close, p)
    if not ok then io.stderr:write("smolwf: closing a pool failed: ", tostring(err), "\n") end
  end
  launch.stop_starting()
end

-- Registered after smol.slurm's hook, so it runs first (hooks run latest
-- first): the providers shut down cleanly before the allocation goes.
local function register_exit_hook()
  if exit_hook_registered then return end
  exit_hook_registered = true
  require("smol.slurm").ensure_exit_hook()
  task.at_exit(close_all)
end

--[[ Creating ]]

-- sandbox.pool{...}; `depth`: frames between the caller and this function.
function pool.new(opts, depth)
  launch.check(opts, 2 + (depth or 0))
  register_exit_hook()
  local members, alloc = launch.start(opts)
  for _, m in ipairs(members) do m.alive, m.acquired, m.opened = true, 0, 0 end
  local self = setmetatable({members = members, allocation = alloc, closed = false,
    sessions = setmetatable({}, {__mode = "k"}),   -- every session opened here -> its member
    counted = setmetatable({}, {__mode = "k"}),    -- sessions of pool:open (they hold a slot)
    watchers = {}, changed = task.event()}, Pool)
  open_pools[self] = true
  return self
end

local function check_pool(self, method)
  if getmetatable(self) ~= Pool then
    error(("pool: %s: expected a pool (did you use '.' instead of ':'?)"):format(method), 3)
  end
  if self.closed then error(("pool: %s: attempt to use a closed pool"):format(method), 3) end
end

--[[ Load and loss ]]

function Pool:notify(what, member)
  for _, fn in ipairs(self.watchers) do fn(what, member) end
  local changed = self.changed
  self.changed = task.event()
  changed:set()
end

function Pool:watch(fn)
  check_pool(self, "watch")
  if type(fn) ~= "function" then error("pool: watch: expected a function", 2) end
  self.watchers[#self.watchers + 1] = fn
end

local function describe_end(conn)
  if conn.exit_code == nil then
    return "stopped answering" .. (conn.broken_because and (" (it " .. conn.broken_because .. ")") or "")
  end
  if conn.exit_signal then return ("was killed by signal %s"):format(conn.exit_signal) end
  return ("exited with status %d"):format(conn.exit_code)
end

-- Marks members whose provider ended as lost, once each, telling the watchers.
function Pool:refresh()
  for _, m in ipairs(self.members) do
    if m.alive and not m.conn:alive() then
      m.alive = false
      m.lost = ("%s %s%s"):format(launch.name(m), describe_end(m.conn), launch.stderr_note(m))
      self:notify("lost", m)
    end
  end
end

-- Sessions of pool:open that were closed give their slot back.
function Pool:count_sessions()
  for sb, m in pairs(self.counted) do
    if sb:is_closed() then
      self.counted[sb] = nil
      m.opened = m.opened - 1
    end
  end
end

local function busy(m)
  return m.acquired + m.opened
end

-- The live member with the lowest busy/slots (only one with a free slot
-- when need_free), or nil.
function Pool:least_loaded(need_free)
  self:refresh()
  self:count_sessions()
  local best, best_ratio
  for _, m in ipairs(self.members) do
    if m.alive and (not need_free or busy(m) < m.slots) then
      local ratio = busy(m) / m.slots
      if not best or ratio < best_ratio then best, best_ratio = m, ratio end
    end
  end
  return best
end

function Pool:any_alive()
  for _, m in ipairs(self.members) do
    if m.alive then return true end
  end
  return false
end

-- The error of a pool with no provider left, naming each one lost.
function Pool:lost_error()
  local lost, nodes = {}, {}
  for _, m in ipairs(self.members) do
    lost[#lost + 1] = m.lost or (launch.name(m) .. " is gone")
    nodes[#nodes + 1] = m.node or m.label
  end
  return errors.new{code = "pool_lost", nodes = nodes,
    message = ("every provider of the pool is lost: %s"):format(table.concat(lost, "; "))}
end

--[[ Placing ]]

-- Waits until a placement may have changed (a release, a loss), polling
-- for providers lost while nothing of theirs was running.
function Pool:wait_change()
  local changed = self.changed
  local timer = core.timer(pool.lost_poll, function() changed:set() end)
  local ok, err = pcall(changed.wait, changed)
  timer:stop()
  if not ok then error(err, 0) end
end

function Pool:acquire()
  check_pool(self, "acquire")
  while true do
    local m = self:least_loaded(true)
    if m then
      m.acquired = m.acquired + 1
      self:notify("busy", m)
      return m
    end
    if not self:any_alive() then error(self:lost_error(), 0) end
    self:wait_change()
    if self.closed then errors.raise{code = "cancelled", message = "the pool was closed"} end
  end
end

function Pool:release(m)
  if getmetatable(self) ~= Pool then error("pool: release: expected a pool", 2) end
  if m.acquired < 1 then error("pool: release: the provider has no slot acquired", 2) end
  m.acquired = m.acquired - 1
  if not self.closed then self:notify("busy", m) end
end

--[[
workspace = {path = DIR, upload = true[, exclude = {...}]}: the session
opens with an empty workspace and DIR (on this machine) is streamed into
it (smol.pool.files.upload). Returns the options sandbox.open gets and
the upload to do, or nil.
]]
local function split_upload(opts, level)
  local ws = opts.workspace
  if type(ws) ~= "table" or not ws.upload then return opts, nil end
  if type(ws.path) ~= "string" then error("pool: open: workspace.path must be a string", level + 1) end
  if ws.exclude ~= nil and type(ws.exclude) ~= "table" then
    error("pool: open: workspace.exclude must be a list of patterns", level + 1)
  end
  for k in pairs(ws) do
    if k ~= "upload" and k ~= "path" and k ~= "exclude" then
      error(("pool: open: workspace.%s does not go with upload"):format(tostring(k)), level + 1)
    end
  end
  opts.workspace = nil   -- an empty workspace, the tree comes after
  return opts, {path = ws.path, exclude = ws.exclude}
end

-- A misuse sandbox.open reports is raised again at our caller's caller.
local function open_session(opts, level)
  local sandbox = require "smol.sandbox"
  local upload
  opts, upload = split_upload(opts, level + 1)
  local ok, sb = pcall(sandbox.open, opts)
  if not ok then
    if type(sb) == "string" then error((sb:gsub("^[^\n:]*:%d+: ", "", 1)), level + 1) end
    error(sb, 0)
  end
  if upload then
    local uploaded, err = pcall(require("smol.pool.files").upload, upload.path, sb, {exclude = upload.exclude})
    if not uploaded then
      pcall(sb.close, sb)
      error(err, 0)
    end
  end
  return sb
end

local function session_opts(opts, member, method)
  if opts ~= nil and type(opts) ~= "table" then
    error(("pool: %s: expected a table of sandbox.open options"):format(method), 3)
  end
  local copy = {}
  for k, v in pairs(opts or {}) do copy[k] = v end
  if copy.program ~= nil or copy.connection ~= nil then
    error(("pool: %s: the pool chooses the provider: no program or connection option"):format(method), 3)
  end
  copy.connection = member.conn
  return copy
end

function Pool:open_on(member, opts)
  check_pool(self, "open_on")
  if type(member) ~= "table" or self.members[member.index] ~= member then
    error("pool: open_on: expected a provider of this pool", 2)
  end
  if not member.alive then error(self:member_lost(member), 0) end
  local sb = open_session(session_opts(opts, member, "open_on"), 2)
  self.sessions[sb] = member
  return sb
end

function Pool:member_lost(member)
  return errors.new{code = "provider_exited", message = member.lost or (launch.name(member) .. " is lost")}
end

function Pool:open(opts)
  check_pool(self, "open")
  local m = self:least_loaded(false)
  if not m then error(self:lost_error(), 0) end
  local sb = open_session(session_opts(opts, m, "open"), 2)
  self.sessions[sb], self.counted[sb] = m, m
  m.opened = m.opened + 1
  self:notify("busy", m)
  return sb
end

--[[ Looking ]]

function Pool:placement(sb)
  local m = self.sessions[sb]
  if not m then return nil end
  return {provider = m.index, node = m.node}
end

-- The member with this index (for the engine and tools).
function Pool:member(index)
  return self.members[index]
end

function Pool:providers()
  if getmetatable(self) ~= Pool then error("pool: providers: expected a pool", 2) end
  if not self.closed then
    self:refresh()
    self:count_sessions()
  end
  local list = {}
  for i, m in ipairs(self.members) do list[i] = Pool.info(m) end
  return list
end

-- One provider as pool:providers() lists it (as it stands: no refresh).
function Pool.info(m)
  return {index = m.index, node = m.node, slots = m.slots, busy = busy(m), alive = m.alive,
    lost = m.lost, label = m.label, pid = m.conn.pid}
end

function Pool:total_slots()
  local n = 0
  for _, m in ipairs(self.members) do
    if m.alive then n = n + m.slots end
  end
  return n
end

--[[ Closing ]]

-- Closes every session opened here, then shuts the providers down (each
-- `shutdown`, KILL after a grace), then releases an allocation made here.
-- Idempotent.
function Pool:close()
  if getmetatable(self) ~= Pool then error("pool: close: expected a pool", 2) end
  if self.closed then return end
  self.closed = true
  open_pools[self] = nil
  local fns = {}
  for sb in pairs(self.sessions) do
    fns[#fns + 1] = function() pcall(sb.close, sb, {timeout = launch.stop_grace}) end
  end
  if #fns > 0 then task.all(fns) end
  launch.stop(self.members)
  self.changed:set()   -- an acquire still waiting gives up
  if self.allocation then self.allocation:release() end
end

Pool.__close = function(self) self:close() end

function Pool:__tostring()
  local alive = 0
  for _, m in ipairs(self.members) do if m.alive then alive = alive + 1 end end
  return ("pool of %d provider(s), %d alive%s"):format(#self.members, alive, self.closed and ", closed" or "")
end

pool.Pool = Pool
return pool
