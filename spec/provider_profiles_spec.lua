-- The bundled provider's profiles: the built-in ones in `describe`, users' own from a JSON
-- file (--profiles FILE or $SMOLWF_PROFILES) with binds, env, network and limits, and the
-- errors a bad file gives.
-- Runs inside the host: /path/to/smolwf /usr/bin/busted --ignore-lua spec/provider_profiles_spec.lua
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local fs = require "smol.fs"
local task = require "smol.task"
local errors = require "smol.errors"
local cjson = require "cjson"
local h = dofile("spec/fixtures/helpers.lua")

local PROVIDER = core.bundled_provider()

local read, write = fs.try_read_file, fs.write_file

-- A program that runs the real provider with a profiles file (as --profiles or $SMOLWF_PROFILES).
local function provider_with(profiles, how)
  local dir = h.tempdir()
  local file = dir .. "/profiles.json"
  write(file, type(profiles) == "string" and profiles or cjson.encode(profiles))
  local path = dir .. "/provider"
  local q = h.shell_quote
  if how == "env" then
    write(path, ("#!/bin/sh\nSMOLWF_PROFILES=%s exec %s \"$@\"\n"):format(q(file), q(PROVIDER)))
  else
    write(path, ("#!/bin/sh\nexec %s \"$@\" --profiles %s\n"):format(q(PROVIDER), q(file)))
  end
  assert(os.execute("chmod 755 " .. q(path)))
  return path, file
end

-- Runs `smolwf-provider serve --profiles FILE` with stdin closed; returns exit code and stderr.
local function serve_with_file(file)
  local ev, err = task.event(), {}
  local proc = assert(core.spawn{file = PROVIDER, args = {PROVIDER, "serve", "--profiles", file},
    stderr = "lines", on_stderr = function(line) if line then err[#err + 1] = line end end,
    on_exit = function(code) ev:set(code) end})
  local code = ev:wait()
  proc:close()
  return code, table.concat(err, "\n")
end

local function sh(sb, script)
  return sb:exec{"sh", "-c", script}
end

describe("provider profiles", function()
  after_each(function()
    sandbox.shutdown()
    h.cleanup()
  end)

  it("describes the built-in profiles and the file's", function()
    local program = provider_with{profiles = {{name = "bwrap/mine", network = true}}}
    local conn = sandbox.connection(program) or (function()
      sandbox.open{program = program, profile = "local/default", workspace = h.tempdir()}:close()
      return sandbox.connection(program)
    end)()
    local result = conn:request("describe", {})
    local seen = {}
    for _, p in ipairs(result.profiles) do seen[p.name] = p end
    assert.same({name = "bwrap/default", isolation = "namespaces", network = false}, seen["bwrap/default"])
    assert.same({name = "bwrap/network", isolation = "namespaces", network = true}, seen["bwrap/network"])
    assert.same({name = "local/default", isolation = "none", network = true}, seen["local/default"])
    -- an automatic profile says what it picks on this machine (bubblewrap works here)
    assert.same({name = "auto/default", isolation = "namespaces", network = false}, seen["auto/default"])
    assert.same({name = "bwrap/mine", isolation = "namespaces", network = true}, seen["bwrap/mine"])
  end)

  it("binds host directories read-only or writable where the profile says", function()
    local ro, rw = h.tempdir(), h.tempdir()
    write(ro .. "/data.txt", "read me")
    local program = provider_with{profiles = {{name = "bwrap/binds", binds = {
      {host = ro, sandbox = "/opt/data"},
      {host = rw, sandbox = "/srv/out", writable = true}}}}}
    local sb = sandbox.open{program = program, profile = "bwrap/binds", workspace = h.tempdir()}
    local r = sh(sb, "cat /opt/data/data.txt; echo x > /opt/data/new 2>&1; echo out > /srv/out/made")
    assert.matches("^read me.*Read%-only file system", r.stdout .. r.stderr)
    assert.is_nil(read(ro .. "/new"))
    assert.equal("out\n", read(rw .. "/made"))
  end)

  it("adds the profile's environment under the request's, from $SMOLWF_PROFILES too", function()
    local program = provider_with({profiles = {{name = "bwrap/env", env = {FROM_PROFILE = "p", BOTH = "profile"}}}}, "env")
    local sb = sandbox.open{program = program, profile = "bwrap/env", workspace = h.tempdir()}
    local r = sb:exec{"sh", "-c", 'echo "$FROM_PROFILE $BOTH $HOME"', env = {BOTH = "request"}}
    assert.equal("p request /workspace\n", r.stdout)
  end)

  it("switches the network off or on", function()
    local program = provider_with{profiles = {
      {name = "bwrap/offline", base = "bwrap/network", network = false},
      {name = "bwrap/online", network = true}}}
    local off = sandbox.open{program = program, profile = "bwrap/offline", workspace = h.tempdir()}
    local on = sandbox.open{program = program, profile = "bwrap/online", workspace = h.tempdir()}
    assert.is_false(off.capabilities.network)
    assert.is_true(on.capabilities.network)
    local count = "tail -n +3 /proc/net/dev | wc -l"
    assert.equal("1\n", sh(off, count).stdout)
    assert.not_equal("1\n", sh(on, count).stdout)
  end)

  it("applies every limit to commands, and a file-size limit stops a big write", function()
    local program = provider_with{profiles = {{name = "bwrap/small", limits = {
      cpu_seconds = 7, address_space = 1073741824, open_files = 64, processes = 4096, file_size = 1048576}}}}
    local sb = sandbox.open{program = program, profile = "bwrap/small", workspace = h.tempdir()}
    -- dash's ulimit: -t seconds, -v KiB, -n files, -p processes, -f 512-byte blocks
    local r = sh(sb, "ulimit -t; ulimit -v; ulimit -n; ulimit -p; ulimit -f")
    assert.equal("7\n1048576\n64\n4096\n2048\n", r.stdout)
    r = sh(sb, "exec head -c 5000000 /dev/zero > /tmp/big")
    assert.equal("XFSZ", r.signal)
    assert.equal(128 + 25, r.exit_code)
    assert.equal(1048576, sb:stat("/tmp/big").size)
  end)

  it("caps each file at the session's disk allowance", function()
    local program = provider_with{profiles = {{name = "bwrap/disk", limits = {disk_bytes = 65536}}}}
    local sb = sandbox.open{program = program, profile = "bwrap/disk", workspace = h.tempdir()}
    assert.equal("128\n", sh(sb, "ulimit -f").stdout)
    local r = sh(sb, "exec head -c 100000 /dev/zero > big")
    assert.equal("XFSZ", r.signal)
    assert.equal(65536, sb:stat("big").size)
  end)

  -- Many files, each under the per-file limit: only the session check can stop this.
  -- The bwrap session fills its /tmp, the local one its workspace.
  for _, case in ipairs{
    {base = "bwrap", fill = "/tmp/fill", what = "kills a session's commands once its files pass the disk allowance, and refuses new ones"},
    {base = "local", fill = "fill", isolation = "none",
     what = "checks the disk allowance under a local base too: commands killed, new ones refused"},
  } do
    it(case.what, function()
      local name = case.base .. "/quota"
      local program = provider_with{profiles = {{name = name, limits = {disk_bytes = 1048576}}}}
      local sb = sandbox.open{program = program, profile = name, workspace = h.tempdir()}
      if case.isolation then assert.equal(case.isolation, sb.capabilities.isolation) end
      local r = sh(sb, "mkdir " .. case.fill .. "; i=0; while [ $i -lt 300 ]; do " ..
                       "head -c 100000 /dev/zero > " .. case.fill .. "/$i || exit 9; i=$((i+1)); sleep 0.01; done")
      assert.equal("KILL", r.signal)
      local e = h.catch(sb.exec, sb, {"true"})
      assert.is_true(errors.is(e, "limit_exceeded"), tostring(e))
      sb:remove(case.fill)
      assert.equal(0, sb:exec{"true"}.exit_code)
    end)
  end

  for _, base in ipairs{"bwrap", "local"} do
    it("refuses a write_file that would pass the disk allowance (" .. base .. ")", function()
      local name = base .. "/small-disk"
      local program = provider_with{profiles = {{name = name, limits = {disk_bytes = 262144}}}}
      local sb = sandbox.open{program = program, profile = name, workspace = h.tempdir()}
      sb:write_file("a", ("x"):rep(100000))
      local e = h.catch(sb.write_file, sb, "b", ("x"):rep(200000))
      assert.is_true(errors.is(e, "limit_exceeded"), tostring(e))
      assert.matches("disk cap of 262144 bytes", tostring(e), 1, true)
      assert.is_true(errors.is(h.catch(sb.stat, sb, "b"), "not_found"), "the refused write made no file")
      -- Rewriting a file counts what it replaces: the same size again fits.
      sb:write_file("a", ("y"):rep(100000))
      sb:remove("a")
      sb:write_file("b", ("x"):rep(200000))
      assert.equal(200000, sb:stat("b").size)
    end)
  end

  it("applies env and limits under a local base as well", function()
    local program = provider_with{profiles = {{name = "local/tight", env = {LOCAL_ENV = "yes"},
                                               limits = {open_files = 32}}}}
    local sb = sandbox.open{program = program, profile = "local/tight", workspace = h.tempdir()}
    assert.equal("none", sb.capabilities.isolation)
    assert.equal("yes 32\n", sh(sb, 'echo "$LOCAL_ENV $(ulimit -n)"').stdout)
  end)

  it("refuses to open a session whose bind source is missing, naming it", function()
    local program = provider_with{profiles = {{name = "bwrap/missing",
      binds = {{host = "/nonexistent/smolwf-dir", sandbox = "/opt/x"}}}}}
    local e = h.catch(sandbox.open, {program = program, profile = "bwrap/missing", workspace = h.tempdir()})
    assert.is_true(errors.is(e, "not_found"), tostring(e))
    assert.matches("/nonexistent/smolwf%-dir", e.message)
  end)

  it("passes on bwrap's reason when a profile's sandbox cannot be built", function()
    local program = provider_with{profiles = {{name = "bwrap/unmountable",
      binds = {{host = h.tempdir(), sandbox = "/usr/smolwf-no-such-dir/x"}}}}}
    local e = h.catch(sandbox.open, {program = program, profile = "bwrap/unmountable", workspace = h.tempdir()})
    assert.is_true(errors.is(e, "internal"), tostring(e))
    assert.matches("did not start: Can't mkdir parents for /usr/smolwf%-no%-such%-dir/x", e.message)
    -- the provider is still serving
    local sb = sandbox.open{program = program, profile = "bwrap/default", workspace = h.tempdir()}
    assert.equal(0, sb:exec{"true"}.exit_code)
  end)

  describe("a bad profiles file stops the provider with a message naming", function()
    local cases = {
      {"invalid JSON", "{\"profiles\": [", "invalid JSON at character"},
      {"the missing list", "{}", 'expected {"profiles": %[...%]}'},
      {"an unknown field", {profiles = {{name = "bwrap/x", netwrok = false}}}, 'profiles%[1%]: unknown field "netwrok"'},
      {"an unknown limit", {profiles = {{name = "bwrap/x", limits = {file_sise = 1}}}}, 'unknown limit "file_sise"'},
      {"a bad limit value", {profiles = {{name = "bwrap/x", limits = {file_size = -1}}}}, "limits.file_size: must be a whole number"},
      {"a bad inode cap", {profiles = {{name = "bwrap/x", limits = {disk_inodes = 0}}}}, "limits.disk_inodes: must be a whole number"},
      {"a built-in name", {profiles = {{name = "bwrap/default"}}}, '"bwrap/default" is already defined'},
      {"an unknown base", {profiles = {{name = "ci/x", base = "ci/nope"}}}, 'unknown profile "ci/nope"'},
      {"a bwrap name on a local base", {profiles = {{name = "bwrap/x", base = "local/default"}}},
       'a "bwrap/%.%.%." profile cannot be based on local/default'},
      {"no network without namespaces", {profiles = {{name = "local/x", network = false}}},
       "network: false needs a bwrap base profile"},
      {"binds on a local base", {profiles = {{name = "local/x", binds = {{host = "/opt"}}}}},
       "binds: binds need a bwrap base profile"},
      {"a relative bind", {profiles = {{name = "bwrap/x", binds = {{host = "opt"}}}}},
       "binds%[1%].host: must be a clean absolute path"},
      {"a bind over /workspace", {profiles = {{name = "bwrap/x", binds = {{host = "/opt", sandbox = "/workspace/o"}}}}},
       "would cover the sandbox's own /workspace"},
      {"a bad env name", {profiles = {{name = "bwrap/x", env = {["A=B"] = "1"}}}}, 'invalid variable name "A=B"'},
      {"bytes that are not UTF-8", '{"profiles": [{"name": "bwrap/r", "root": "/srv/r\255fs"}]}',
       "not valid UTF%-8 %(byte 0xff at offset 49%)"},
      {"a NUL byte, which would end the file early", '{"profiles": []}\0{"profiles": [{"name": "bwrap/x"}]}',
       "a NUL byte at offset 16"},
    }
    for _, c in ipairs(cases) do
      it(c[1], function()
        local _, file = provider_with(c[2])
        local code, stderr = serve_with_file(file)
        assert.equal(1, code)
        assert.matches("profiles file " .. file:gsub("%p", "%%%0"), stderr)
        assert.matches(c[3], stderr)
      end)
    end

    it("a file that does not exist", function()
      local code, stderr = serve_with_file("/nonexistent/profiles.json")
      assert.equal(1, code)
      assert.matches("/nonexistent/profiles.json: No such file or directory", stderr, 1, true)
    end)
  end)
end)
