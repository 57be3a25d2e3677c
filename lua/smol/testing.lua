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
-- testing.golden(name, text)  compares with spec/golden/NAME (smol.testing.golden)
-- testing.run_workflow(def_or_file, opts) -> run table (the report's data)
-- testing.fake_provider{...}  canned behaviours (smol.testing.fake_provider)
local lfs = require "lfs"
local assertions = require "smol.testing.assertions"
local golden = require "smol.testing.golden"
local fake_provider = require "smol.testing.fake_provider"

local testing = {assertions = assertions, golden_files = golden}

--- Compares `actual` with spec/golden/NAME; raises with a unified diff.
function testing.golden(name, actual)
  return golden.check(name, actual)
end

testing.fake_provider = fake_provider.new

--[[ The sandbox fixture ]]

-- busted's block functions (lazy_setup, before_each...) live in the
-- environment busted gives the spec file, not in _G: find that environment
-- through the _ENV upvalue of the calling describe body.
local function busted_env()
  for level = 3, 10 do
    local info = debug.getinfo(level, "f")
    if not info then break end
    for i = 1, math.huge do
      local name, value = debug.getupvalue(info.func, i)
      if name == nil then break end
      if name == "_ENV" and type(value) == "table" then
        local ok, fn = pcall(function() return value.lazy_setup end)
        if ok and type(fn) == "function" then return value end
      end
    end
  end
  error("testing.sandbox must be called inside a busted describe block", 3)
end

local OPEN_OPTIONS = {program = true, profile = true, workspace = true, cwd = true, group = true}
local FIXTURE_OPTIONS = {fresh = true, files = true, open = true}

local function check_options(opts)
  if type(opts) ~= "table" then
    error("bad argument #1 to 'testing.sandbox' (a table expected, got " .. type(opts) .. ")", 3)
  end
  for k in pairs(opts) do
    if not OPEN_OPTIONS[k] and not FIXTURE_OPTIONS[k] then
      error(("testing.sandbox: unknown option `%s` (known: cwd, files, fresh, group, open,"
        .. " profile, program, workspace)"):format(tostring(k)), 3)
    end
  end
end

local Fixture = {}
Fixture.__index = Fixture

function Fixture:open()
  local spec = {}
  for k in pairs(OPEN_OPTIONS) do spec[k] = self.opts[k] end
  local open = self.opts.open or require("smol.sandbox").open
  self.session = open(spec)
  for path, content in pairs(self.opts.files or {}) do
    local dir = path:match("^(.*)/[^/]*$")
    if dir then self.session:create_dir_all(dir) end
    self.session:write_file(path, content)
  end
end

-- Processes whose working directory is inside `dir` (readable /proc only).
local function processes_in(dir)
  local found = {}
  for pid in lfs.dir("/proc") do
    if pid:match("^%d+$") then
      local cwd = lfs.symlinkattributes("/proc/" .. pid .. "/cwd", "target")
      if cwd and (cwd == dir or cwd:sub(1, #dir + 1) == dir .. "/") then found[#found + 1] = pid end
    end
  end
  return found
end

--- Checks that a closed session left nothing behind. Only a session without
-- isolation has host paths we can look at; a namespaced one is checked by
-- the provider's own tests.
function Fixture.check_no_leaks(session)
  local caps = session.capabilities or {}
  local dir = session.cwd
  if caps.isolation ~= "none" or type(dir) ~= "string" or dir:sub(1, 1) ~= "/" then return end
  local pids = processes_in(dir)
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

-- Copies the argv into exec results so failure messages can show it.
local function with_argv(spec, r)
  if type(r) == "table" and r.argv == nil and type(spec) == "table" then
    r.argv = table.move(spec, 1, #spec, 1, {})
  end
  return r
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
        if key == "exec" then return with_argv(..., value(self, ...)) end
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
-- cwd, group), `files = {path = content}` written after each open, and
-- `open` (a function replacing sandbox.open). After each close the fixture
-- checks that the session left no process or directory behind.
function testing.sandbox(opts)
  opts = opts or {}
  check_options(opts)
  local env = busted_env()
  local fixture = setmetatable({opts = opts}, Fixture)
  local function open() fixture:open() end
  local function close() fixture:close() end
  if opts.fresh then
    env.before_each(open)
    env.after_each(close)
  else
    env.lazy_setup(open)
    env.lazy_teardown(close)
  end
  return new_proxy(fixture)
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

--- Removes a directory tree without following symlinks.
function testing.remove_tree(path)
  local mode = lfs.symlinkattributes(path, "mode")
  if mode == "directory" then
    for name in lfs.dir(path) do
      if name ~= "." and name ~= ".." then testing.remove_tree(path .. "/" .. name) end
    end
    return lfs.rmdir(path)
  elseif mode then
    return os.remove(path)
  end
end

local report_dirs = {}

local function temp_report_dir()
  local core = require "smol.core"
  local task = require "smol.task"
  local dir = assert(core.mkdtemp((os.getenv("TMPDIR") or "/tmp") .. "/smolwf-test-run-XXXXXX"))
  if #report_dirs == 0 and task.at_exit then
    task.at_exit(function()
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
-- temp directory; run.by_id maps instance ids to instances.
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
  local f = io.open(run.report_dir .. "/" .. relative, "rb")
  if not f then return nil end
  local content = f:read("a")
  f:close()
  return content
end

return testing
