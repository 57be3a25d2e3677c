-- The benchmark drivers still run: each, with tiny sizes, prints every
-- figure it promises (a number on each line) and reports no failure.
-- Nothing is timed or compared here: the figures are for bench/*.sh on a
-- quiet machine (the README's development section).
local core = require "smol.core"
local h = dofile("spec/fixtures/helpers.lua")

local SMOLWF = core.exe_path()
local PROVIDER = core.bundled_provider()
local BENCH_DIR = PROVIDER and PROVIDER:match("^(.*)/[^/]*$") .. "/bench/"

local function bench_program(name)
  local path = BENCH_DIR and BENCH_DIR .. name
  local f = path and io.open(path)
  if f then f:close() end
  return f and path or nil
end

-- Runs smolwf SCRIPT ARGS with extra environment; its output and whether it exited 0.
local function run(env, script, args)
  local words = {}
  for k, v in pairs(env) do words[#words + 1] = k .. "=" .. h.shell_quote(v) end
  words[#words + 1] = h.shell_quote(SMOLWF)
  words[#words + 1] = h.shell_quote(script)
  for _, a in ipairs(args) do words[#words + 1] = h.shell_quote(a) end
  local p = io.popen("env " .. table.concat(words, " ") .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

-- Asserts that out has a line starting (after spaces) with label, then a number.
local function assert_figure(out, label)
  local escaped = label:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
  assert(out:find("\n%s*" .. escaped .. "%s+%d+%.?%d*") or out:find("^%s*" .. escaped .. "%s+%d+%.?%d*"),
    ("no figure for %q in:\n%s"):format(label, out))
end

describe("bench/provider_bench.lua", function()
  local spawn_loop = bench_program("smolwf-bench-spawn-loop")
  local client = bench_program("smolwf-bench-exec-client")

  it("prints every figure for both profiles, from both clients", function()
    if not (spawn_loop and client) then
      pending("the bench programs are not built next to smolwf-provider (" .. tostring(BENCH_DIR) .. ")")
      return
    end
    local out, ok = run({}, "bench/provider_bench.lua", {PROVIDER, spawn_loop, "50", "1048576", "all"})
    assert(ok, out)
    assert.is_nil(out:find("failed", 1, true), out)
    assert_figure(out, "fresh bwrap --unshare-all per command")
    for _, profile in ipairs{"local/default", "bwrap/default"} do
      for _, label in ipairs{"exec /bin/true via provider, " .. profile, "ratio, " .. profile,
          "16 in flight, " .. profile, "stdout payload, byte-counting reader, " .. profile,
          "provider peak RSS streaming 1 MiB, " .. profile} do
        assert_figure(out, label)
      end
    end
    assert_figure(out, "the same from smolwf's sb:exec")
    assert_figure(out, "its ratio")
  end)

  it("exec_client fails loudly on a command that fails, and on a profile the provider refuses", function()
    if not client then pending("smolwf-bench-exec-client is not built") return end
    local function serve_one(profile, program)
      local p = io.popen(("echo 1 | %s %s %s %s 2>&1; echo \"status $?\""):format(h.shell_quote(client),
        h.shell_quote(PROVIDER), h.shell_quote(profile), h.shell_quote(program)))
      local out = p:read("a")
      p:close()
      return out
    end
    assert.matches("^%d+%.%d\nstatus 0\n$", serve_one("local/default", "/bin/true"))
    assert.matches("did not exit 0.*status 1", serve_one("local/default", "/bin/false"))
    assert.matches("answered an error.*unknown profile.*status 1", serve_one("nope/x", "/bin/true"))
  end)
end)

describe("bench/host_bench.lua", function()
  it("prints every figure", function()
    local fake, pingpong = bench_program("smolwf-bench-provider"), bench_program("smolwf-bench-pingpong")
    if not (fake and pingpong) then pending("the bench programs are not built") return end
    local out, ok = run({}, "bench/host_bench.lua", {fake, pingpong, "1048576", "all"})
    assert(ok, out)
    for _, label in ipairs{"bare C ping-pong, median", "sequential round trip, median",
        "round trips/s, 64 in flight", "stdout payload through events", "peak RSS after streaming 1 MiB"} do
      assert_figure(out, label)
    end
  end)
end)

describe("bench/archive_bench.lua", function()
  it("prints every figure", function()
    local out, ok = run({}, "bench/archive_bench.lua", {"1048576", "1", "2"})
    assert(ok, out)
    for _, label in ipairs{"sandbox.copy (read_archive | write_archive), MB/s", "tar c | tar x through a pipe, MB/s",
        "ratio, tar / archive", "host peak RSS (VmHWM), MiB", "provider peak RSS (VmHWM), MiB"} do
      assert_figure(out, label)
    end
  end)
end)

describe("bench/lib.lua", function()
  local lib = dofile("bench/lib.lua")

  it("gives the median, of an even count the mean of the middle two, leaving the list as it is", function()
    local list = {5, 1, 3}
    assert.are.same({3, list}, {lib.median(list), {5, 1, 3}})
    assert.are.equal(2.5, lib.median({4, 1, 3, 2}))
  end)

  it("is where every Lua benchmark takes its median from", function()
    local own = {}
    for file in require("lfs").dir("bench") do
      local f = file:match("%.lua$") and file ~= "lib.lua" and io.open("bench/" .. file)
      if f then
        if f:read("a"):find("local function median", 1, true) then own[#own + 1] = file end
        f:close()
      end
    end
    assert.are.same({}, own)
  end)
end)

describe("bench/binary_output_bench.lua", function()
  it("prints every figure", function()
    local out, ok = run({}, "bench/binary_output_bench.lua", {"1", "1"})
    assert(ok, out)
    for _, label in ipairs{"random bytes, wall", "build-log text, wall", "ratio binary / text"} do
      assert_figure(out, label)
    end
  end)
end)

describe("bench/offloop_bench.lua", function()
  it("prints every figure", function()
    for _, profile in ipairs{"local/default", "bwrap/default"} do
      local out, ok = run({}, "bench/offloop_bench.lua", {"200", PROVIDER, profile})
      assert(ok, out)
      for _, label in ipairs{"files removed", "remove took ms", "idle describe ms", "idle exec ms",
                             "probes during remove", "busy describe ms", "busy exec ms"} do
        assert_figure(out, label)
      end
      if profile:match("^bwrap") then
        assert_figure(out, "stopped helper describe ms")
        assert_figure(out, "stopped helper exec ms")
      end
    end
  end)
end)
