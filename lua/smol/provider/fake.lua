-- testing.fake_provider{...}: a provider built from canned behaviours, to
-- force what a real provider cannot be made to do on demand (a crash
-- mid-exec, a slow reply, an unknown event type, an error on the 2nd call).
--
--   local fp = testing.fake_provider{
--     capabilities = {exec = true},                      -- of the default `open`
--     exec = {events = {{type = "started"}, {type = "stdout", data = "half"}}, crash = 3},
--     read_file = {error = {code = "not_found", message = "no such file"}},
--     write_file = {delay = 5},                          -- answers {} after 5 s
--     stat = {calls = {{error = "io_error"}, {result = {type = "file", size = 1}}}},
--     spawn = function(params, req) req:event{type = "started"}; return {process_id = "p"} end,
--   }
--   local sb = sandbox.open{program = fp.program}
--
-- A behaviour is a function (params, req) -> result, run as a method of a
-- Lua provider (see smol.provider.server), or a table with any of:
--   stderr  a line written to the provider's stderr first
--   events  events sent in order (`data`, `stdout`... are sent as base64)
--   delay   seconds to wait after the events
--   crash   exit status: the provider exits at once, the request unanswered
--   hang    true: never answer (until shutdown cancels the request)
--   error   an error reply: a code string, or {code = ..., message = ...}
--   result  the result table (default {})
--   calls   a list of behaviours, one per call, the last one repeating
-- `open`, `close` and `shutdown` have working defaults (options:
-- `capabilities` and `session_cwd` of the sessions `open` answers); any
-- other method without a behaviour answers `unknown_method`.
--
-- The provider runs in its own process (`smolwf provider serve`), so
-- functions are copied there: their upvalues are copied by value as they are
-- when fake_provider is called, and modules are required again there.
local fs = require "smol.fs"
local serialize = require "smol.provider.serialize"

local M = {}

local OPTIONS = {capabilities = true, session_cwd = true}
local BEHAVIOUR_KEYS = {stderr = true, events = true, delay = true, crash = true, hang = true,
  error = true, result = true, calls = true}

local function check_behaviour(method, b, where)
  if type(b) == "function" then return end
  if type(b) ~= "table" then
    error(("fake_provider: `%s` must be a function or a table, got %s"):format(where, type(b)), 4)
  end
  for k in pairs(b) do
    if not BEHAVIOUR_KEYS[k] then
      error(("fake_provider: `%s` has an unknown field `%s` (known: calls, crash, delay, error,"
        .. " events, hang, result, stderr)"):format(where, tostring(k)), 4)
    end
  end
  for i, call in ipairs(b.calls or {}) do
    check_behaviour(method, call, ("%s.calls[%d]"):format(where, i))
  end
end

local function check_spec(spec)
  if type(spec) ~= "table" then
    error("bad argument #1 to 'fake_provider' (a table of behaviours expected, got " .. type(spec) .. ")", 3)
  end
  for k, b in pairs(spec) do
    if type(k) ~= "string" then error("fake_provider: method names must be strings", 3) end
    if not OPTIONS[k] then check_behaviour(k, b, k) end
  end
end

local Fake = {}
Fake.__index = Fake

--- Removes the generated provider files (the process belongs to the
-- sandbox pool, which shuts it down). Also done at exit.
function Fake:cleanup()
  if self.removed then return end
  self.removed = true
  os.remove(self.script)
  os.remove(self.dir)
end

local all = setmetatable({}, {__mode = "k"})
local hook_installed = false

local function cleanup_at_exit()
  local task = require "smol.task"
  if hook_installed or not task.at_exit then return end
  hook_installed = true
  task.at_exit(function() for fake in pairs(all) do fake:cleanup() end end)
end

--- Builds the provider; returns {program = path to pass as
-- sandbox.open{program = ...}, cleanup = fn}.
function M.new(spec)
  check_spec(spec)
  local source = serialize.to_source(spec, "fake_provider")
  local dir = fs.temp_dir("smolwf-fake")
  local fake = setmetatable({dir = dir, script = dir .. "/fake.lua"}, Fake)
  fs.write_file(fake.script, ("return require('smol.provider.fake').methods(%q)\n"):format(source))
  fake.program = require("smol.provider.server").program(fake.script)
  all[fake] = true
  cleanup_at_exit()
  return fake
end

--[[ Inside the provider process ]]

local function perform(b, params, req)
  local task = require "smol.task"
  local server = require "smol.provider.server"
  if b.stderr then io.stderr:write(b.stderr, "\n") end
  for _, ev in ipairs(b.events or {}) do req:event(ev) end
  if b.delay then task.sleep(b.delay) end
  if b.crash then
    server.flush()   -- the events above must reach the client first
    os.exit(b.crash, false)
  end
  if b.hang then task.event():wait() end
  if b.error then
    local e = type(b.error) == "table" and b.error or {code = b.error, message = "fake " .. b.error}
    server.fail(e.code, e.message or ("fake " .. tostring(e.code)))
  end
  return b.result or {}
end

local function behaviour_method(b)
  if type(b) == "function" then return b end
  local count = 0
  return function(params, req)
    count = count + 1
    local current = b
    if b.calls then current = b.calls[math.min(count, #b.calls)] end
    if type(current) == "function" then return current(params, req) end
    return perform(current, params, req)
  end
end

local function default_methods(spec)
  local opened = 0
  return {
    open = function(params)
      opened = opened + 1
      return {id = "fake_" .. opened, cwd = spec.session_cwd or "/fake",
        capabilities = spec.capabilities or {exec = true}}
    end,
    close = function() return {} end,
  }
end

--- The methods table for smol.provider.server, from the serialized spec.
function M.methods(source)
  local spec = serialize.load(source, "=fake_provider", _ENV)
  local methods = default_methods(spec)
  for name, b in pairs(spec) do
    if not OPTIONS[name] then methods[name] = behaviour_method(b) end
  end
  return methods
end

return M
