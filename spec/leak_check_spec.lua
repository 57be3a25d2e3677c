-- The suite's leak check (spec/fixtures/leak_check.lua, loaded through
-- .busted): a spec file that leaves a loop handle, a registry ref, a child
-- process or a temp entry behind fails, naming it; a clean one passes.
-- Each case runs `smolwf test` on a small spec file in a fresh TMPDIR.
local core = require "smol.core"
local lfs = require "lfs"
local h = dofile("spec/fixtures/helpers.lua")

-- Runs `smolwf test FILE` (from the repository root, so .busted applies) on
-- a spec file with `body` as its one test (its line 4); returns exit code,
-- output and the TMPDIR it had. `leaky`: a leak is expected, so the check
-- need not give it the usual settling time.
-- `shared_tmp`: TMPDIR is not the run's own (no SMOLWF_LEAK_CHECK_TMPDIR),
-- as when `smolwf test` runs by hand with /tmp.
local function spec_file(body)
  local dir = h.tempdir()
  local tmp = dir .. "/tmp"
  assert(lfs.mkdir(tmp))
  local file = dir .. "/case_spec.lua"
  local f = assert(io.open(file, "w"))
  f:write('local core = require "smol.core"\nlocal fs = require "smol.fs"\n',
    'describe("case", function() it("runs", function()\n', body, '\nend) end)\n')
  f:close()
  return file, tmp
end

local function run_spec(body, leaky, shared_tmp)
  local file, tmp = spec_file(body)
  local p = io.popen(("TMPDIR=%s SMOLWF_LEAK_CHECK_TMPDIR=%s SMOLWF_LEAK_CHECK_SETTLE=%s timeout 60 %s test %s 2>&1")
    :format(h.shell_quote(tmp), shared_tmp and "" or "1", leaky and "0.5" or "10", h.shell_quote(core.exe_path()),
      h.shell_quote(file)))
  local out = p:read("a")
  local _, _, status = p:close()
  return status, out, tmp
end

describe("the leak check after each spec file", function()
  after_each(h.cleanup)

  it("passes a file that closes what it opened", function()
    local status, out = run_spec([[
      local t = core.timer(10, function() end)
      t:stop()
      fs.remove_tree(fs.temp_dir("tidy"))
      local done = false
      local p = core.spawn{file = "true", args = {"true"}, on_exit = function() done = true end}
      while not done do core.run_once() end
      p:close()]])
    assert.are.equal(0, status, out)
    assert.matches("1 success / 0 failures / 0 errors", out)
  end)

  it("names a timer left running: its handle and the refs anchoring it", function()
    local status, out = run_spec("_G.kept = core.timer(100, function() end)", true)
    assert.are.equal(1, status, out)
    assert.matches("case_spec.lua left behind:", out)
    assert.matches("loop handles: 1 timer", out)
    assert.matches("2 registry refs: function [^\n]*case_spec.lua:4, smol.timer", out)
  end)

  it("names a child process left running, and kills it", function()
    local status, out = run_spec('_G.kept = core.spawn{file = "sleep", args = {"sleep", "77"}}', true)
    assert.are.equal(1, status, out)
    local pid = tonumber(out:match("child process (%d+) sleep 77"))
    assert(pid, out)
    assert.matches("loop handles: 1 process", out)
    assert.is_true(h.wait_until(function() return not h.alive(pid) end))
  end)

  it("names an entry left in TMPDIR, and removes it", function()
    local status, out, tmp = run_spec('fs.temp_dir("forgotten")', true)
    assert.are.equal(1, status, out)
    assert.matches("temp entry " .. tmp:gsub("%p", "%%%0") .. "/forgotten%-", out)
    assert.are.same({}, h.list(tmp))
  end)

  it("names a spec helper's temp dir left in a TMPDIR it does not own, and removes it", function()
    local status, out, tmp = run_spec('dofile("spec/fixtures/provider_helpers.lua").tempdir()', true, true)
    assert.are.equal(1, status, out)
    assert.matches("temp dir of a spec helper " .. tmp:gsub("%p", "%%%0") .. "/smolwf%-provider%-spec%-", out)
    assert.are.same({}, h.list(tmp))
  end)

  it("has an interrupted run remove the helpers' temp dirs, a mount in one included", function()
    local mount = io.popen("id -u"):read("l") == "0"   -- root can mount a tmpfs there
    local file, tmp = spec_file(([[
      local dir = dofile("spec/fixtures/provider_helpers.lua").tempdir()
      dofile("spec/fixtures/helpers.lua").tempdir()
      if %s then assert(os.execute("mkdir " .. dir .. "/mnt && mount -t tmpfs smolwf-spec " .. dir .. "/mnt")) end
      fs.write_file(dir .. "/../ready", "")
      require("smol.task").sleep(60)]]):format(tostring(mount)))
    local done = require("smol.task").event()
    local p = assert(core.spawn{file = core.exe_path(), args = {core.exe_path(), "test", file},
      env = {PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/", TMPDIR = tmp},
      on_exit = function(code) done:set(code) end})
    assert.is_true(h.wait_until(function() return lfs.attributes(tmp .. "/ready") ~= nil end, 30))
    p:kill("INT")
    assert.are.equal(130, done:wait())
    p:close()
    os.remove(tmp .. "/ready")
    assert.are.same({}, h.list(tmp))
    assert.is_nil(io.open("/proc/self/mounts"):read("a"):find(tmp, 1, true), "the tmpfs is unmounted")
  end)

  it("shuts down the pooled providers between files, which is not a leak", function()
    if not core.bundled_provider() then return pending("not built: no smolwf-provider next to smolwf") end
    local status, out = run_spec([[
      local sb = require("smol.sandbox").open{profile = "local/default"}
      assert(sb:exec{"true"}.ok)
      sb:close()]])
    assert.are.equal(0, status, out)
  end)
end)
