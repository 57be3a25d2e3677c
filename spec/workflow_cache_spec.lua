-- The step cache, end to end through `smolwf run` in a project directory
-- of its own: a hit restores outputs and the return value; every part of
-- the key that changes makes a miss that --explain names exactly; a hit
-- is never stale (an upvalue, a required module, an input's content with
-- the same mtime and size, env, params); --no-cache; LRU eviction; the
-- cache directory is tagged as a cache.
local cjson = require "cjson"
local lfs = require "lfs"
local fs = require "smol.fs"
local h = require "spec.workflow_helpers"

local WORKFLOW = [[
local wf = require "smol.workflow"
local flags = "-O2"   -- FLAGS
return wf.define{name = "cached", sandbox = {profile = "local/default", workspace = "."},
  env = {MODE = "debug"},   -- ENV
  steps = {
    {name = "build", inputs = {"src/**.c", "Makefile"}, outputs = {"out/app", "out/docs"},
     run = function(ctx)
       local lib = require "projlib"
       ctx:sh("mkdir -p out/docs && cat src/*.c > out/app && chmod +x out/app && echo d > out/docs/a.txt"
         .. " && echo built >> " .. ctx.params.counter)
       return {bin = "out/app", flags = flags, lib = lib.version, mode = ctx.env.MODE, n = 3}
     end},
    {name = "use", needs = "build", run = function(ctx)
       local r = ctx:sh("test -x out/app && cat out/app out/docs/a.txt")
       return {seen = r.stdout, input = ctx.inputs.build}
     end},
  }}
]]

local function project()
  local dir = h.temp_dir()
  fs.mkdir_p(dir .. "/src")
  fs.write_file(dir .. "/wf.lua", WORKFLOW)
  fs.write_file(dir .. "/projlib.lua", 'return {version = "1.0"}\n')
  fs.write_file(dir .. "/src/main.c", "int main(void) { return 0; }\n")
  fs.write_file(dir .. "/Makefile", "all:\n")
  return dir
end

-- Runs the project's workflow; returns the CLI result and the report.
local function run(dir, ...)
  local report_dir = h.temp_dir()
  local args = { "run", "--no-progress", "--report-dir", report_dir, "wf.lua", "--param", "counter=" .. dir .. "/runs" }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  local r = h.smolwf(args, { cwd = dir })
  local report = cjson.decode((assert(h.read(report_dir .. "/report.json"), r.stdout .. r.stderr)))
  local by_id = {}
  for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
  return r, by_id, report
end

local function builds(dir)
  return select(2, (h.read(dir .. "/runs") or ""):gsub("built\n", ""))
end

local function edit(path, from, to)
  local text = assert(h.read(path))
  fs.write_file(path, (text:gsub(from, to)))
end

describe("the step cache", function()
  after_each(h.cleanup)

  it("restores the outputs (modes too) and the return value on a hit, and says cached with the key", function()
    local dir = project()
    local r1, first = run(dir)
    assert.are.equal(0, r1.code, r1.stdout .. r1.stderr)
    assert.are.same({ "miss", true }, { first.build.cache.status, first.build.cache.stored })
    local r2, second = run(dir, "--explain", "build")
    assert.are.equal(0, r2.code, r2.stdout .. r2.stderr)
    assert.are.equal(1, builds(dir), "the cached step ran again")
    assert.are.same({ "hit", first.build.cache.key }, { second.build.cache.status, second.build.cache.key })
    assert.are.same(first.build.value, second.build.value)
    assert.are.same(first.use.value, second.use.value)
    assert.are.equal(0, #second.build.attempts)
    assert.matches("✓  build +cached +%-  +0 +%-  +cached " .. first.build.cache.key:sub(1, 12), r2.stdout)
    assert.matches("explain build: cached: key " .. first.build.cache.key:sub(1, 12), r2.stderr)
    local tag = h.read(dir .. "/.smolwf/cache/CACHEDIR.TAG")
    assert.matches("^Signature: 8a477f597d28d172789f06886806bc55\n", tag)
  end)

  it("is never stale: each changed part misses, and --explain names it exactly", function()
    local dir = project()
    assert.are.equal(0, run(dir).code)
    local cases = {
      { function() edit(dir .. "/wf.lua", '"%-O2"   %-%- FLAGS', '"-O3"') end, "changed: upvalue flags" },
      { function() edit(dir .. "/projlib.lua", '"1%.0"', '"1.1"') end, "changed: module projlib" },
      { function()   -- same size, same mtime, other content
        local path = dir .. "/src/main.c"
        local attrs = lfs.attributes(path)
        fs.write_file(path, (assert(h.read(path)):gsub("0;", "1;")))
        assert(lfs.touch(path, attrs.access, attrs.modification))
        assert.are.same({ attrs.size, attrs.modification }, { lfs.attributes(path, "size"), lfs.attributes(path, "modification") })
      end, "changed: input src/main.c" },
      { function() edit(dir .. "/wf.lua", 'MODE = "debug"', 'MODE = "release"') end, "changed: env MODE" },
      { function() fs.write_file(dir .. "/src/extra.c", "int x;\n") end, "added: input src/extra.c" },
    }
    for i, case in ipairs(cases) do
      case[1]()
      local r, by_id = run(dir, "--explain", "build")
      assert.are.equal(0, r.code, r.stdout .. r.stderr)
      assert.are.equal(i + 1, builds(dir), case[2] .. " did not make the step run")
      assert.are.same({ case[2] }, by_id.build.cache.changed)
      assert.matches("explain build: ran: last stored %x+\n  " .. case[2]:gsub("%p", "%%%0") .. "\n", r.stderr)
    end
    -- A parameter the step reads is part of its key; one it does not read is not.
    local r, by_id = run(dir, "--param", "extra=1")
    assert.are.equal(0, r.code)
    assert.are.equal("hit", by_id.build.cache.status)
    r, by_id = run(dir, "--param", "counter=" .. dir .. "/runs2")
    assert.are.same({ "changed: param counter" }, by_id.build.cache.changed)
    r, by_id = run(dir)
    assert.are.equal("hit", by_id.build.cache.status, "each parameter value keeps its own result")
    assert.are.equal(#cases + 1, builds(dir))
    assert.are.equal("1.1", by_id.build.value.lib, "the changed module was the one used")
  end)

  it("runs every step with --no-cache, and still stores the result", function()
    local dir = project()
    run(dir)
    local r, by_id = run(dir, "--no-cache", "--explain", "build")
    assert.are.equal(0, r.code)
    assert.are.equal(2, builds(dir))
    assert.are.same({ "--no-cache" }, by_id.build.cache.changed)
    assert.is_true(by_id.build.cache.stored)
    assert.are.equal("hit", select(2, run(dir)).build.cache.status)
  end)

  it("--explain says why a step that is not cached ran", function()
    local dir = project()
    local r = run(dir, "--explain", "use")
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches("explain use: not cached: the step declares no inputs or outputs %(nor cache = true%)\n", r.stderr)
  end)

  it("evicts the least recently used entries beyond --cache-cap", function()
    local dir = project()
    local keys = {}
    for i = 1, 3 do
      fs.write_file(dir .. "/src/main.c", ("int main(void) { return %d; } /* %s */\n"):format(i, ("x"):rep(4000)))
      local _, by_id = run(dir, "--cache-cap", "9K")
      keys[i] = by_id.build.cache.key
    end
    local function stored(key) return lfs.attributes(dir .. "/.smolwf/cache/entries/" .. key:sub(1, 2) .. "/" .. key) ~= nil end
    assert.are.same({ false, true, true }, { stored(keys[1]), stored(keys[2]), stored(keys[3]) })
  end)

  it("says why a step cannot be cached, and fails a step whose declared output is missing", function()
    local dir = h.temp_dir()
    fs.mkdir_p(dir)
    fs.write_file(dir .. "/wf.lua", [[
      local wf = require "smol.workflow"
      local out = io.stdout
      return wf.define{name = "odd", sandbox = {profile = "local/default"},
        secrets = {TOK = {param = "tok"}}, steps = {
        {name = "secret", cache = true, run = function(ctx) return ctx.secrets.TOK end},
        {name = "userdata", cache = true, run = function() return out ~= nil end},
        {name = "missing", outputs = {"never/made"}, run = function(ctx) ctx:sh("true") end},
        {name = "fn", cache = true, run = function() return function() end end},
        {name = "task", cache = true, run = (function() local t = coroutine.create(print) return function() return t ~= nil end end)()},
      }}]])
    local r = h.smolwf({ "run", "--no-progress", "--keep-going", "--report-dir", dir .. "/r", "wf.lua",
      "--param", "tok=t0k3n-value" }, { cwd = dir })
    assert.are.equal(1, r.code)
    local report = cjson.decode((h.read(dir .. "/r/report.json")))
    local by_id = {}
    for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
    assert.are.equal("miss", by_id.userdata.cache.status, "io.stdout is a value the engine names")
    assert.are.same({ "failed", "the declared output `never/made` is not there after the step succeeded" },
      { by_id.missing.status, by_id.missing.error })
    assert.are.equal("not stored: its return value holds a function", by_id.fn.cache.note)
    assert.are.equal("not stored: its return value holds a secret", by_id.secret.cache.note)
    assert.are.same({ "success", "uncacheable" }, { by_id.task.status, by_id.task.cache.status })
    assert.matches("it closes over a thread", by_id.task.cache.reason)
  end)
end)

describe("a run whose steps cannot use the step cache", function()
  after_each(h.cleanup)

  it("never loads the cache's modules", function()
    local dir = h.temp_dir()
    fs.mkdir_p(dir)
    fs.write_file(dir .. "/wf.lua", [[
      local wf = require "smol.workflow"
      return wf.define{name = "plain", steps = {{name = "only", run = function()
        for _, m in ipairs{"smol.workflow.step_cache", "smol.workflow.cache", "smol.workflow.cache_key"} do
          assert(package.loaded[m] == nil, m .. " was loaded")
        end
      end}}}
    ]])
    local r = h.smolwf({"run", "--no-progress", "--report-dir", h.temp_dir(), "wf.lua"}, {cwd = dir})
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
  end)
end)
