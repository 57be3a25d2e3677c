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
local function run_spec(body, leaky)
  local dir = h.tempdir()
  local tmp = dir .. "/tmp"
  assert(lfs.mkdir(tmp))
  local file = dir .. "/case_spec.lua"
  local f = assert(io.open(file, "w"))
  f:write('local core = require "smol.core"\nlocal fs = require "smol.fs"\n',
    'describe("case", function() it("runs", function()\n', body, '\nend) end)\n')
  f:close()
  local p = io.popen(("TMPDIR=%s SMOLWF_LEAK_CHECK_TMPDIR=1 SMOLWF_LEAK_CHECK_SETTLE=%s timeout 60 %s test %s 2>&1")
    :format(h.shell_quote(tmp), leaky and "0.5" or "10", h.shell_quote(core.exe_path()), h.shell_quote(file)))
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

  it("shuts down the pooled providers between files, which is not a leak", function()
    if not core.bundled_provider() then return pending("not built: no smolwf-provider next to smolwf") end
    local status, out = run_spec([[
      local sb = require("smol.sandbox").open{profile = "local/default"}
      assert(sb:exec{"true"}.ok)
      sb:close()]])
    assert.are.equal(0, status, out)
  end)
end)
