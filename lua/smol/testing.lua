-- smol.testing: helpers for scenario specs run by `smolwf test` (busted
-- inside the host).
--
--   local testing = require "smol.testing"      -- also registers the assertions
--   describe("my tool", function()
--     local sb = testing.sandbox{profile = "local/default", workspace = "fixtures/proj", fresh = true}
--     it("builds", function()
--       local r = sb:exec{"make"}
--       assert.exec_ok(r)
--       assert.file_contains(sb, "out/log.txt", "done")
--       testing.golden("build-output.txt", r.stdout)
--     end)
--   end)
--
-- testing.sandbox{...}        a session fixture (see Fixture below)
-- testing.session_of(sb)      the session a fixture currently forwards to
-- testing.check_no_leaks(s)   what the fixture checks after each close
-- testing.golden(name, text)  compares with spec/golden/NAME (smol.testing.golden)
-- testing.run_workflow(def_or_file, opts) -> run table (the report's data)
-- testing.report_file(run, relative_path) -> content of a report file
-- testing.fake_provider{...}  canned behaviours (smol.provider.fake)
-- testing.remove_tree(path)   rm -r without following symlinks (smol.fs.remove_tree)
-- See README.md ("Testing with smol-workflow") for the user's guide.
local lfs = require "lfs"
local fs = require "smol.fs"
local assertions = require "smol.testing.assertions"
local golden = require "smol.testing.golden"
local fake_provider = require "smol.provider.fake"

local testing = {assertions = assertions, golden_files = golden}

--- Compares `actual` with spec/golden/NAME; raises with a unified diff.
function testing.golden(name, actual)
  return golden.check(name, actual)
end

testing.fake_provider = fake_provider.new

--[[ The sandbox fixture ]]

-- busted's block functions (lazy_setup, before_each, finally...) live in
-- the environment busted gives the spec file, not in _G: find that
-- environment through the _ENV upvalue of a caller (the describe or it
-- body). Returns nil outside busted.
local function busted_env(wanted)
  for level = 3, 12 do
    local info = debug.getinfo(level, "f")
    if not info then break end
    for i = 1, math.huge do
      local name, value = debug.getupvalue(info.func, i)
      if name == nil then break end
      if name == "_ENV" and type(value) == "table" and value ~= _G then
        local ok, fn = pcall(function() return value[wanted] end)
        if ok and type(fn) == "function" then return value end
      end
    end
  end
end

local OPEN_OPTIONS = {program = true, profile = true, workspace = true, cwd = true, group = true,
  open_timeout = true, on_progress = true}
local FIXTURE_OPTIONS = {fresh = true, files = true, open = true, setup = true}

local function check_options(opts)
  if type(opts) ~= "table" then
    error("bad argument #1 to 'testing.sandbox' (a table expected, got " .. type(opts) .. ")", 3)
  end
  for k in pairs(opts) do
    if not OPEN_OPTIONS[k] and not FIXTURE_OPTIONS[k] then
      error(("testing.sandbox: unknown option `%s` (known: cwd, files, fresh, group, on_progress, open,"
        .. " open_timeout, profile, program, setup, workspace)"):format(tostring(k)), 3)
    end
  end
  if opts.setup ~= nil and type(opts.setup) ~= "function" then
    error("bad argument #1 to 'testing.sandbox' (setup must be a function)", 3)
  end
end

local Fixture = {}
Fixture.__index = Fixture

-- A new session: opened, its files written, its setup run.
function Fixture:new_session()
  local spec = {}
  for k in pairs(OPEN_OPTIONS) do spec[k] = self.opts[k] end
  local open = self.opts.open or require("smol.sandbox").open
  local session = open(spec)
  local ok, err = pcall(function()
    Fixture.write_files(session, self.opts.files or {})
    if self.opts.setup then self.opts.setup(session) end
  end)
  if not ok then
    pcall(session.close, session)   -- a half-prepared session must not stay open
    error(err, 0)
  end
  return session
end

function Fixture:open()
  self.session = self:new_session()
end

--[[
A fresh session with a setup step: the setup runs once, in a base session
opened before the first test, and each test gets a fork of it (where the
session announces "fork"; else a session opened and set up anew). The
base is closed after the last test.
]]
function Fixture:open_fork()
  if not self.base then self.base = self:new_session() end
  if self.base.capabilities.fork then self.session = self.base:fork()
  else self.session = self:new_session() end
end

function Fixture:close_base()
  local base = self.base
  if not base then return end
  self.base = nil
  base:close()
  Fixture.check_no_leaks(base)
end

function Fixture.write_files(session, files)
  for path, content in pairs(files) do
    local dir = path:match("^(.*)/[^/]*$")
    if dir then session:create_dir_all(dir) end
    session:write_file(path, content)
  end
end

-- Processes whose working directory is inside `dir` (readable /proc only;
-- a removed directory reads as "DIR (deleted)").
local function processes_in(dir)
  local found = {}
  for pid in lfs.dir("/proc") do
    if pid:match("^%d+$") then
      local cwd = lfs.symlinkattributes("/proc/" .. pid .. "/cwd", "target")
      cwd = cwd and cwd:gsub(" %(deleted%)$", "")
      if cwd and (cwd == dir or cwd:sub(1, #dir + 1) == dir .. "/") then found[#found + 1] = pid end
    end
  end
  return found
end

-- How long killed processes may take to be gone after `close` answered
-- (a SIGKILL is delivered asynchronously), in seconds.
testing.leak_grace = 2

-- Waits (polling /proc, bounded by leak_grace) until no process runs in dir.
local function lingering_processes(dir)
  local core, task = require "smol.core", require "smol.task"
  local deadline = core.now() + testing.leak_grace
  local pids = processes_in(dir)
  while #pids > 0 and core.now() < deadline do
    task.sleep(0.01)
    pids = processes_in(dir)
  end
  return pids
end

--- Checks that a closed session left nothing behind. Only a session without
-- isolation has host paths we can look at; a namespaced one is checked by
-- the provider's own tests.
function Fixture.check_no_leaks(session)
  local caps = session.capabilities or {}
  local dir = session.cwd
  if caps.isolation ~= "none" or type(dir) ~= "string" or dir:sub(1, 1) ~= "/" then return end
  local pids = lingering_processes(dir)
  if #pids > 0 then
    error(("sandbox session %s leaked processes after close (pids %s running in %s)")
      :format(session.id, table.concat(pids, ", "), dir), 0)
  end
  if lfs.attributes(dir, "mode") then
    error(("sandbox session %s left its directory %s behind after close"):format(session.id, dir), 0)
  end
end

testing.check_no_leaks = Fixture.check_no_leaks

function Fixture:close()
  local session = self.session
  if not session then return end
  self.session = nil
  session:close()
  Fixture.check_no_leaks(session)
end

local fixtures = setmetatable({}, {__mode = "k"})   -- proxy -> fixture

--- The session a fixture proxy currently forwards to (nil between tests of
-- a `fresh` fixture, and before/after its describe block).
function testing.session_of(proxy)
  local fixture = fixtures[proxy]
  return fixture and fixture.session
end

local function new_proxy(fixture)
  local proxy = {}
  fixtures[proxy] = fixture
  return setmetatable(proxy, {
    __index = function(_, key)
      local session = fixture.session
      if not session then
        error(("testing.sandbox: `%s` used while no session is open (the fixture opens"
          .. " before the tests of its describe and closes after them)"):format(tostring(key)), 2)
      end
      local value = session[key]
      if type(value) ~= "function" then return value end
      return function(self, ...)
        if self == proxy then self = fixture.session end
        return value(self, ...)
      end
    end,
    __tostring = function() return "testing.sandbox fixture: " .. tostring(fixture.session) end,
  })
end

--- A sandbox session for the tests of the enclosing describe block: opened
-- before its first test and closed after its last one, or with
-- `fresh = true` opened anew (fresh workspace) before each test and closed
-- after it. Options: those of sandbox.open (program, profile, workspace,
-- cwd, group, open_timeout, on_progress), `files = {path = content}` written after each open,
-- `setup = function(sb) end` run after that (with `fresh`: once, and each
-- test gets a fork of the set-up session), and `open` (a function
-- replacing sandbox.open). After each close the fixture checks that the
-- session left no process or directory behind.
function testing.sandbox(opts)
  opts = opts or {}
  check_options(opts)
  local env = busted_env("lazy_setup")
  if not env then error("testing.sandbox must be called inside a busted describe block", 2) end
  local fixture = testing._new_fixture(opts)
  local function open() fixture:open() end
  local function close() fixture:close() end
  if opts.fresh and opts.setup then
    env.before_each(function() fixture:open_fork() end)
    env.after_each(close)
    env.lazy_teardown(function() fixture:close_base() end)
  elseif opts.fresh then
    env.before_each(open)
    env.after_each(close)
  else
    env.lazy_setup(open)
    env.lazy_teardown(close)
  end
  return fixture.proxy
end

-- A fixture not tied to busted (for the fixture's own specs).
function testing._new_fixture(opts)
  local fixture = setmetatable({opts = opts}, Fixture)
  fixture.proxy = new_proxy(fixture)
  return fixture
end

--[[ Workflows ]]

local function load_workflow_file(path, args)
  local env = require "smol.workflow.env"
  local chunk, err = env.load_file(path, {arg = {[0] = path}})
  if not chunk then error(("testing.run_workflow: cannot load %s: %s"):format(path, err), 3) end
  local def = chunk(table.unpack(args or {}))
  if type(def) ~= "table" then
    error(("testing.run_workflow: %s did not return a workflow (wf.define{...})"):format(path), 3)
  end
  return def
end

--- Removes a directory tree without following symlinks; raises naming
-- the entry it could not remove.
testing.remove_tree = fs.remove_tree

local report_dirs = {}

-- A temp report directory, removed at exit. (Not at the end of the test:
-- busted keeps one `finally` per test, and it belongs to the spec.)
local function temp_report_dir()
  local dir = fs.temp_dir("smolwf-test-run")
  if #report_dirs == 0 then
    require("smol.task").at_exit(function()
      for _, d in ipairs(report_dirs) do testing.remove_tree(d) end
    end)
  end
  report_dirs[#report_dirs + 1] = dir
  return dir
end

--- Runs a workflow (a definition or a file returning one) and returns the
-- run table: run.result, run.instances[i].status/exit_code/error/attempts,
-- run.report_dir with report.json, junit.xml and logs/. opts are those of
-- smol.workflow's run() (jobs, steps, params, keep_going, observers,
-- open...) plus `args` for a file. The report directory defaults to a new
-- temp directory removed at exit; run.by_id maps instance ids to
-- instances.
function testing.run_workflow(def_or_file, opts)
  local wf = require "smol.workflow"
  opts = opts or {}
  local def = def_or_file
  if type(def_or_file) == "string" then def = load_workflow_file(def_or_file, opts.args) end
  local run_opts = {}
  for k, v in pairs(opts) do run_opts[k] = v end
  run_opts.args = nil
  run_opts.report_dir = opts.report_dir or temp_report_dir()
  local run = wf.run(def, run_opts)
  run.by_id = {}
  for _, inst in ipairs(run.instances) do run.by_id[inst.id] = inst end
  return run
end

--- Reads a file of the run's report directory (e.g. "logs/build.stdout.log").
function testing.report_file(run, relative)
  return (fs.try_read_file(run.report_dir .. "/" .. relative))
end

return testing
