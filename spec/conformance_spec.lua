-- The provider conformance kit (smol.provider.conformance, `smolwf provider-check`):
-- the bundled provider passes all of it under local/default and
-- bwrap/default, and a deliberately naive provider (spec/fixtures/
-- naive_provider.lua) fails exactly where it is broken.
local conformance = require "smol.provider.conformance"
local fs = require "smol.fs"
local core = require "smol.core"
local wire = require "smol.provider.conformance.wire"
local hostside = require "smol.provider.conformance.hostside"

local SPEC_DIR = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec"
local NAIVE = SPEC_DIR .. "/fixtures/naive_provider.lua"
local BUNDLED = core.bundled_provider()

local function failures(report)
  local lines = {}
  for _, r in ipairs(report.results) do
    if r.status == "fail" then lines[#lines + 1] = conformance.format(r) end
  end
  return table.concat(lines, "\n")
end

local function skipped(report)
  local names = {}
  for _, r in ipairs(report.results) do
    if r.status == "skip" then names[#names + 1] = r.group .. ": " .. r.name end
  end
  return names
end

-- Pids of this process's children (a set), to show the kit leaves none behind.
local function my_children()
  local mine = hostside.read("/proc/self/stat"):match("^(%d+)")
  local kids = {}
  for name in require("lfs").dir("/proc") do
    local stat = name:match("^%d+$") and hostside.read("/proc/" .. name .. "/stat")
    if stat and stat:match("^%d+ %b() %a (%d+)") == mine then kids[name] = true end
  end
  return kids
end

-- Children now that were not there before (earlier specs' may have ended meanwhile).
local function new_children(before)
  local added = {}
  for pid in pairs(my_children()) do
    if not before[pid] then added[#added + 1] = pid end
  end
  return added
end

-- nil when `profile` opens on the bundled provider here, else why not.
local function unsupported(profile)
  local conn = assert(wire.start({BUNDLED, "serve"}))
  local prov, name = profile:match("^(.-)/(.*)$")
  local req = conn:call("open", {metadata = {request_id = "probe", sandbox_group_id = "probe"},
    profile = {provider = prov, name = name}, workspace_sync = {host_path = wire.null},
    cwd = wire.null})
  conn:stop()
  if req.result then return nil end
  return require("smol.provider.conformance.expect").reply(req)
end

local function bundled_passes(profile)
  describe("against the bundled provider under " .. profile, function()
    local report, why_not, children_before

    setup(function()
      why_not = unsupported(profile)
      if why_not then return end
      children_before = my_children()
      report = conformance.run{program = BUNDLED, profile = profile}
    end)

    it("passes every check", function()
      if why_not then return pending(profile .. " cannot run here: " .. why_not) end
      assert.is_true(report.passed > 60, "only " .. report.passed .. " checks passed")
      assert.are.equal(0, report.failed, "failed checks:\n" .. failures(report))
    end)

    it("runs every extension (skips only what this profile cannot do)", function()
      if why_not then return pending(profile .. " cannot run here: " .. why_not) end
      for _, name in ipairs(skipped(report)) do
        -- Only checks that depend on the profile's isolation may be skipped.
        assert.is_truthy(name:match("^isolation: ") or name:match("^lifecycle: close removes"),
          "unexpected skip: " .. name)
      end
    end)

    it("leaves no process and no temp directory behind", function()
      if why_not then return pending(profile .. " cannot run here: " .. why_not) end
      assert.is_false(hostside.exists(report.workspace))
      assert.are.same({}, new_children(children_before))
    end)
  end)
end

describe("smol.provider.conformance", function()
  bundled_passes("local/default")
  bundled_passes("bwrap/default")

  -- The example provider written in Lua (scripts/lua_provider.lua, run by
  -- `smolwf provider serve`): part 1 only, and all of it right.
  describe("against the example Lua provider", function()
    it("passes every check it does not skip", function()
      local file = SPEC_DIR .. "/../scripts/lua_provider.lua"
      local report = conformance.run{program = "sh",
        args = {"-c", 'exec "$0" provider serve "$1"', core.exe_path(), file},
        profile = "lua/local"}
      assert.is_true(report.passed > 60, "only " .. report.passed .. " checks passed")
      assert.are.equal(0, report.failed, "failed checks:\n" .. failures(report))
    end)
  end)

  describe("against a naive provider", function()
    local report, by_name, root

    setup(function()
      root = fs.temp_dir("smolwf-naive")
      report = conformance.run{program = "lua5.4", args = {NAIVE, root}, profile = "naive/default",
        groups = {"files", "escapes", "exec", "concurrency", "lifecycle", "bad lines", "process",
          "strict lines", "hostile files"}}
      by_name = conformance.by_name(report)
    end)

    teardown(function()
      if root then hostside.remove_tree(root) end
    end)

    local function status(name)
      local r = by_name[name]
      assert.is_not_nil(r, "no check named " .. name)
      return r.status
    end

    it("catches each of its faults", function()
      for _, name in ipairs{
        "escapes: `..` out of the session is permission_denied",
        "escapes: absolute paths outside the session are permission_denied",
        "escapes: workspace symlinks pointing out are never followed",
        "escapes: symlinks a command creates pointing out are permission_denied",
        "exec: the provider's own environment does not leak into commands",
        "exec: exec streams output while the command runs",
        "concurrency: a long exec does not delay a later read_file",
        "lifecycle: close kills the session's processes, children included",
        "lifecycle: shutdown kills the processes of open sessions, answers {} and exits 0",
        "bad lines: an id that is not a string or integer gets an error with id null",
        "strict lines: a key twice in one object is invalid_request naming the key",
        "strict lines: an integer id from 2^53 on comes back exactly or is refused with id null",
        "strict lines: \\u0000 in an id, a method or a path is refused or kept exactly",
        "strict lines: a request without params gets invalid_request naming `params`",
        "strict lines: a line that is not UTF-8 gets an error reply that is JSON",
        "strict lines: a path component over 255 bytes is an error saying so; nothing is created",
        "hostile files: read_file and write_file of a FIFO get an error at once; other requests are served meanwhile",
      } do
        assert.are.equal("fail", status(name), name .. ": " .. conformance.format(by_name[name]))
      end
    end)

    it("passes what it does right", function()
      for _, name in ipairs{
        "files: write_file then read_file round-trips all 256 byte values",
        "files: create_dir_all makes nested directories",
        "exec: exec answers stdout, stderr and a non-zero exit code as a result",
        "exec: exec events are started, output..., exited, then the result",
        "exec: all 256 byte values: stdin -> command -> stdout",
        "exec: a command killed by a signal exits 128+signo",
        "concurrency: 16 execs in flight each get their own output",
        "bad lines: a line that is not JSON gets invalid_request with id null",
        "bad lines: an unknown method gets unknown_method with the request's id",
        "strict lines: two requests on one line, or text after a request, are invalid_request",
        "strict lines: errors echoing long or multi-byte ids, methods and paths stay valid UTF-8",
      } do
        assert.are.equal("pass", status(name), name .. ": " .. conformance.format(by_name[name]))
      end
    end)

    it("skips the extensions it does not announce", function()
      assert.are.equal("skip", status("process: kill KILL ends the process with 137"))
    end)

    it("names a reply line that is not valid UTF-8 JSON, and the problem", function()
      local r = by_name["strict lines: a line that is not UTF-8 gets an error reply that is JSON"]
      assert.matches("got line is not one valid UTF%-8 JSON object %(the line is not valid UTF%-8 "
        .. "%(byte 0xff at offset %d+%)%): \"{", conformance.format(r))
    end)

    it("says what was expected and what came back", function()
      local line = conformance.format(by_name["exec: the provider's own environment does not leak into commands"])
      assert.matches("^FAIL exec: the provider's own environment does not leak into commands: expected no "
        .. "SMOLWF_CONFORMANCE_LEAK .*; got seen: \"SMOLWF_CONFORMANCE_LEAK=leak%-", line)
    end)

    it("catches a provider that dies on a bad line", function()
      local crashing = conformance.by_name(conformance.run{program = "lua5.4",
        args = {NAIVE, root, "crash"}, profile = "naive/default", groups = {"bad lines"}})
      local served = crashing["bad lines: after all that the provider keeps serving"]
      assert.are.equal("fail", served.status)
      assert.matches("provider exit code 1", served.got)
      local protocol
      for name, r in pairs(crashing) do
        if name:match("^bad lines: replies well%-formed") then protocol = r end
      end
      assert.are.equal("fail", protocol.status)
      assert.matches("provider exited unasked %(exit code 1%)", protocol.got)
    end)

    it("leaves none of the naive provider's processes behind", function()
      local left = hostside.find_procs(root)   -- its unique argument: other runs may be going on
      assert.are.same({}, left)
      assert.is_false(hostside.exists(report.workspace))
      -- nor the sleeps the lifecycle checks made it start (it never kills them itself)
      for _, p in ipairs(hostside.find_procs("sleep 313")) do
        assert.are.equal("Z", p.state, "a kit sleep outlived the run: pid " .. p.pid)
      end
    end)
  end)

  describe("wire.wait_until", function()
    it("sees a condition outside the loop (a file) change without waiting for its deadline", function()
      local path = os.tmpname()
      os.remove(path)
      local exited = false
      local writer = assert(core.spawn{file = "sh", args = {"sh", "-c", "sleep 0.2; : > " .. path .. "; exec sleep 30"},
        on_exit = function() exited = true end})
      finally(function()   -- one finally: busted keeps only the last one a test registers
        writer:kill("KILL")
        wire.wait_until(function() return exited end, 30)
        writer:close()
        os.remove(path)
      end)
      local t0 = core.now()
      -- no event comes while the file appears: the sleep keeps its output and exit for later
      assert.is_true(wire.wait_until(function() return hostside.exists(path) end, 20))
      assert.is_true(core.now() - t0 < 10, "waited until the deadline")
    end)

    it("gives up at its deadline and says so", function()
      local t0 = core.now()
      assert.is_false(wire.wait_until(function() return false end, 0.1))
      -- libuv timers count whole milliseconds of a loop time cached per turn,
      -- so the deadline may fire up to ~1 ms before uv_hrtime says 0.1 s passed
      local waited = core.now() - t0
      assert.is_true(waited >= 0.098, "gave up after " .. waited .. "s")
    end)

    it("sleeps in the loop while it waits instead of spinning", function()
      local cpu0 = os.clock()
      wire.wait_until(function() return false end, 0.5)
      local cpu = os.clock() - cpu0
      assert.is_true(cpu < 0.2, ("spent %.2f s of CPU in a 0.5 s wait"):format(cpu))
    end)
  end)

  describe("run()", function()
    it("rejects bad options with a clear message", function()
      assert.has_error(function() conformance.run{} end,
        "conformance.run: `program` must be a path or an argv list")
      assert.has_error(function() conformance.run{program = "x", profile = "nope"} end,
        "conformance.run: `profile` must look like PROVIDER/NAME, got nope")
    end)

    it("rejects an open_timeout that is not a positive number", function()
      assert.has_error(function() conformance.run{program = "x", open_timeout = 0} end,
        "conformance.run: `open_timeout` must be a positive number of seconds, got 0")
    end)
  end)

  -- One cause, one failure: a provider that cannot open a session fails the
  -- open once and the checks that need a session are skipped, counted.
  describe("when open fails", function()
    -- The results by status: {pass = {...}, fail = {...}, skip = {...}}.
    local function by_status(report)
      local t = {pass = {}, fail = {}, skip = {}}
      for _, r in ipairs(report.results) do table.insert(t[r.status], r) end
      return t
    end

    -- Every skipped result is one blocked by the failed open.
    local function all_blocked(skips)
      for _, r in ipairs(skips) do
        if not r.blocked then return false, conformance.format(r) end
      end
      return true
    end

    it("fails once with the provider's error and skips the rest (provider exits at once)", function()
      local started = core.now()
      local report = conformance.run{program = "sh", args = {"-c", "echo oops >&2; exit 3"},
        profile = "x/y"}
      assert.is_true(core.now() - started < 10, "took " .. (core.now() - started) .. "s")
      local r = by_status(report)
      assert.are.same({0, 1}, {report.passed, report.failed})
      assert.are.equal("FAIL session: open with profile x/y answers a session: expected a session "
        .. '{id, capabilities}; got no reply (provider exited (exit code 3)); provider stderr: "oops"',
        conformance.format(r.fail[1]))
      -- it does not serve at all: even the checks that need no session are skipped
      assert.is_true(report.skipped > 80, "only " .. report.skipped .. " skipped")
      assert.are.equal(report.skipped, report.blocked)
      assert.is_true(all_blocked(r.skip))
      assert.are.equal("0 passed, 1 failed, " .. report.skipped
        .. " skipped (they need a session, and open failed)", conformance.summary(report))
    end)

    it("runs only the checks that need no session when the provider refuses the profile", function()
      local before = my_children()
      local report = conformance.run{program = BUNDLED, profile = "nosuch/x"}
      local r = by_status(report)
      assert.are.equal(1, report.failed, "failed checks:\n" .. failures(report))
      assert.matches("^FAIL session: open with profile nosuch/x answers a session: .*; got error "
        .. "invalid_request: .*unknown profile `nosuch/x`", conformance.format(r.fail[1]))
      assert.is_true(all_blocked(r.skip))
      assert.is_true(report.blocked > 70, "only " .. report.blocked .. " blocked")
      for _, pass in ipairs(r.pass) do
        assert.is_truthy(pass.group == "bad lines" or pass.group == "strict lines", pass.group)
      end
      assert.is_true(#r.pass >= 5, "only " .. #r.pass .. " passed")
      assert.is_false(hostside.exists(report.workspace))
      assert.are.same({}, new_children(before))
    end)

    it("gives up on a provider that never answers open after open_timeout", function()
      local marker = "600." .. hostside.token():gsub("%D", ""):sub(1, 6)
      local started = core.now()
      local report = conformance.run{program = "sh", args = {"-c", "exec sleep " .. marker},
        profile = "x/y", open_timeout = 0.3}
      assert.is_true(core.now() - started < 10, "took " .. (core.now() - started) .. "s")
      local r = by_status(report)
      assert.are.same({0, 1}, {report.passed, report.failed})
      assert.matches("; got no reply within 0.3s$", conformance.format(r.fail[1]))
      assert.are.equal(report.skipped, report.blocked)
      assert.is_true(report.skipped > 80, "only " .. report.skipped .. " skipped")
      assert.are.same({}, hostside.find_procs("sleep\0" .. marker))
    end)

    it("fails at once for a program that does not exist", function()
      local ok, err = pcall(conformance.run, {program = "/no/such/provider"})
      assert.is_false(ok)
      assert.matches("cannot start provider `/no/such/provider`", err)
    end)
  end)
end)

-- `smolwf provider-check`, run as a real subprocess.
describe("smolwf provider-check", function()
  local function run_cli(args)
    local out, status = {}, nil
    local argv = {core.exe_path(), "provider-check"}
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    local proc = assert(core.spawn{file = argv[1], args = argv, stdout = "chunks", stderr = "chunks",
      on_stdout = function(d) if d then out[#out + 1] = d end end,
      on_stderr = function(d) if d then out[#out + 1] = d end end,
      on_exit = function(code) status = code end})
    assert.is_true(wire.wait_until(function() return status ~= nil end, 60), "provider-check hung")
    proc:close()
    return status, table.concat(out)
  end

  it("prints one line per check and the summary; exits 0 when all pass", function()
    local status, out = run_cli{"--profile", "local/default", "--group", "files", "--", BUNDLED}
    assert.matches("^PASS files: write_file then read_file round%-trips all 256 byte values: ", out)
    assert.matches("\n15 passed, 0 failed\n$", out)
    assert.are.equal(0, status, out)
  end)

  it("exits 1 and prints what failed for a broken provider", function()
    local root = fs.temp_dir("smolwf-naive")
    local status, out = run_cli{"--group", "escapes", "-q", "--", "lua5.4", NAIVE, root}
    hostside.remove_tree(root)
    assert.are.equal(1, status, out)
    assert.matches("FAIL escapes: `%.%.` out of the session is permission_denied: expected "
      .. "permission_denied for each; got .*write_file %.%./escape%-%x+: expected error "
      .. "permission_denied, got result {}", out)
    assert.not_matches("PASS", out)
    assert.matches("\n%d passed, [1-9]%d* failed\n$", out)
  end)

  it("exits 2 on a usage error or a provider that cannot start", function()
    local status, out = run_cli{"--group", "nonsense", "--", BUNDLED}
    assert.are.equal(2, status)
    assert.matches("unknown group `nonsense` (the groups: session, files, ", out, 1, true)
    status, out = run_cli{"--", "/no/such/provider"}
    assert.are.equal(2, status)
    assert.matches("cannot start provider `/no/such/provider`", out)
  end)

  it("prints one FAIL line for an open the provider refuses, and counts the skipped", function()
    local status, out = run_cli{"--profile", "nosuch/x", "--", BUNDLED}
    assert.are.equal(1, status, out)
    local fails = {}
    for line in out:gmatch("[^\n]+") do
      if line:match("^FAIL") then fails[#fails + 1] = line end
      assert.not_matches("^SKIP", line)
    end
    assert.are.equal(1, #fails, out)
    assert.matches("^FAIL session: open with profile nosuch/x answers a session: expected a "
      .. "session {id, capabilities}; got error invalid_request: .*unknown profile `nosuch/x`", fails[1])
    assert.matches("\n%d+ passed, 1 failed, %d+ skipped %(they need a session, and open failed%)\n$", out)
  end)

  it("stops waiting for open after --open-timeout: one failure, nothing left running", function()
    local marker = "600." .. hostside.token():gsub("%D", ""):sub(1, 6)
    local status, out = run_cli{"--open-timeout", "0.3", "--", "sh", "-c", "exec sleep " .. marker}
    assert.are.equal(1, status, out)
    assert.matches("^FAIL session: open with profile auto/default answers a session: expected a "
      .. "session {id, capabilities}; got no reply within 0.3s\n0 passed, 1 failed, %d+ skipped "
      .. "%(they need a session, and open failed%)\n$", out)
    assert.are.same({}, hostside.find_procs("sleep\0" .. marker))
  end)

  it("prints its help with usage, options and exit status; exits 0", function()
    local status, out = run_cli{"--help"}
    assert.are.equal(0, status, out)
    assert.matches("^usage: smolwf provider%-check %[OPTIONS%]", out)
    assert.matches("\noptions:\n  %-%-profile P ", out)
    assert.matches("\n  %-%-open%-timeout S ", out)
    assert.matches("\nexit status: 0 every check passed, 1 a check failed, 2 usage error", out)
  end)

  it("names an unknown option and exits 2", function()
    local status, out = run_cli{"--bogus"}
    assert.are.equal(2, status, out)
    assert.are.equal("smolwf provider-check: unknown option '--bogus' (see smolwf provider-check --help)\n", out)
    status, out = run_cli{"--open-timeout", "soon"}
    assert.are.equal(2, status, out)
    assert.matches("%-%-open%-timeout needs a positive number of seconds, got 'soon'", out)
  end)

  it("lists its groups", function()
    local status, out = run_cli{"--list"}
    assert.are.equal(0, status)
    assert.matches("\nescapes\n", out)
    assert.matches("\nprocess %(needs `process`%)\n", out)
  end)
end)
