-- smol.sandbox: sessions, processes and files against fake and real providers.
-- Runs inside the host: /path/to/smolwf /usr/bin/busted --ignore-lua spec/sandbox_spec.lua
local sandbox = require "smol.sandbox"
local jsonl = require "smol.jsonl"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local null = require("cjson").null
local h = dofile("spec/fixtures/helpers.lua")

local SEED = h.fixture("seed_provider.lua")
local FAULT = h.fixture("fault_provider.lua")

local function params_of(ws, method)
  for _, r in ipairs(h.requests(ws)) do
    if r.method == method then return r.params end
  end
end

describe("smol.sandbox", function()
  local handles
  before_each(function() handles = core.open_handles() end)

  -- Every provider a test started is shut down and gone before the next,
  -- and so are the loop handles it used.
  after_each(function()
    local conns = sandbox.connections()
    sandbox.shutdown()
    for _, conn in ipairs(conns) do
      assert.is_false(h.alive(conn.pid), "provider " .. conn.pid .. " left running")
    end
    assert.same({}, sandbox.connections())
    h.cleanup()
    assert.is_true(h.handles_back_to(handles), "uv handles left open: " .. core.open_handles() .. " > " .. handles)
  end)

  describe("with the seed's fake provider", function()
    it("round-trips binary files, exec output and spawn as in the original's test", function()
      local ws = h.tempdir()
      local sb = sandbox.open{program = SEED, profile = "fake/test", workspace = ws}
      assert.same({"session_1", "/sandbox", true}, {sb.id, sb.cwd, sb.capabilities.exec})
      sb:write_file("binary.bin", "\0\1\255")
      assert.equal("\0\1\255", sb:read_file("binary.bin"))
      local chunks = {}
      local r = sb:exec{"ignored", on_stdout = function(c) chunks[#chunks + 1] = c end}
      assert.same({0, "\0\1\255", "\254\0", true}, {r.exit_code, r.stdout, r.stderr, r.ok})
      assert.same({"\0\1\255"}, chunks)
      local events = {}
      local p = sb:spawn{"ignored", on_event = function(ev) events[#events + 1] = ev end}
      assert.equal("spawn_1", p.process_id)
      assert.same({type = "started", process_id = "spawn_1"}, events[1])
      sb:close()
      sandbox.shutdown(SEED)
      assert.same({"open", "write_file", "read_file", "exec", "spawn", "close", "shutdown"}, h.methods(ws))
      assert.equal("AAH/", params_of(ws, "write_file").content_base64)
    end)

    it("sends open's fields as the original does, and the session itself to close", function()
      local ws = h.tempdir()
      local sb = sandbox.open{program = SEED, workspace = ws, group = "grp_1", cwd = "sub"}
      sb:close()
      local open, close = params_of(ws, "open"), params_of(ws, "close")
      assert.same({provider = "auto", name = "default"}, open.profile)
      assert.same({host_path = ws}, open.workspace_sync)
      assert.equal("grp_1", open.metadata.sandbox_group_id)
      assert.matches("^req_%x+$", open.metadata.request_id)
      assert.equal("sub", open.cwd)
      assert.same({id = "session_1", cwd = "/sandbox", capabilities = {exec = true}}, close)
    end)

    it("sends no extension field the session did not announce", function()
      local ws = h.tempdir()
      local sb = sandbox.open{program = SEED, workspace = ws}
      local r = sb:exec{"x", max_output_bytes = 4, capture = false, stdin = "in"}
      assert.is_nil(r.stdout)
      assert.equal(0, r.exit_code)
      local p = params_of(ws, "exec")
      assert.is_nil(p.timeout_ms or p.idle_timeout_ms or p.max_output_bytes)
      assert.equal(core.b64encode("in"), p.stdin_base64)
      assert.equal(null, p.cwd)
      assert.equal(null, p.env)
    end)

    it("refuses methods of capabilities the session did not announce", function()
      local sb = sandbox.open{program = SEED, workspace = h.tempdir()}
      local function unsupported(fn, op)
        local e = h.catch(fn)
        assert.is_true(errors.is(e, "unsupported"), tostring(e))
        assert.equal(op, e.op)
        assert.matches('does not announce the "[%w_]+" capability', e.message)
      end
      -- a deadline it cannot keep, and cannot enforce by killing (no "process")
      unsupported(function() sb:exec{"x", timeout = 5} end, "exec")
      unsupported(function() sb:exec{"x", idle_timeout = 2} end, "exec")
      unsupported(function() sb:spawn{"x", timeout = 5} end, "spawn")
      unsupported(function() sb:read_file("a", {offset = 1}) end, "read_file")
      unsupported(function() sb:stat("a") end, "stat")
      unsupported(function() sb:list_dir(".") end, "list_dir")
      unsupported(function() sb:write_file("a", "x", {append = true}) end, "write_file")
      local p = sb:spawn{"x"}
      unsupported(function() p:wait() end, "wait")
      unsupported(function() p:kill() end, "kill")
      unsupported(function() p:write("x") end, "write_stdin")
      unsupported(function() p:close_stdin() end, "write_stdin")
    end)

    it("closes idempotently, on <close>, and refuses use after close", function()
      local ws = h.tempdir()
      do
        local sb <close> = sandbox.open{program = SEED, workspace = ws}
        sb:close()
        sb:close()
        assert.has_error(function() sb:read_file("x") end, "sandbox: read_file: attempt to use a closed session")
      end
      do local _ <close> = sandbox.open{program = SEED, workspace = ws} end
      assert.same({"open", "close", "open", "close"}, h.methods(ws))
    end)

    it("serves every session of one program from one provider process", function()
      local a = sandbox.open{program = SEED, workspace = h.tempdir()}
      local conn = sandbox.connection(SEED)
      local b = sandbox.open{program = SEED, workspace = h.tempdir()}
      assert.equal(conn, sandbox.connection(SEED))
      assert.equal(conn, a:connection())
      assert.equal(conn, b:connection())
      a:close() b:close()
      sandbox.shutdown(SEED)
      assert.equal(0, conn.exit_code)
      assert.is_false(h.alive(conn.pid))
    end)

    it("raises argument errors for misuse", function()
      local sb = sandbox.open{program = SEED, workspace = h.tempdir()}
      assert.has_error(function() sb:exec{} end, "sandbox: exec: argv is empty")
      assert.has_error(function() sb:exec{"a", 3} end, "sandbox: exec: argv[2] must be a string")
      assert.has_error(function() sb:write_file("a", 3) end, "sandbox: write_file: data must be a string")
      assert.has_error(function() sandbox.open{program = SEED, profile = "nope"} end,
        'sandbox.open: profile must be "PROVIDER/NAME", got "nope"')
      assert.has_error(function() sb.read_file("x") end)
      assert.has_error(function() sandbox.open{program = SEED, max_line_bytes = "1"} end,
        "sandbox.open: option max_line_bytes must be a positive integer")
      -- a misspelled option is named, not taken for an absent one (an empty workspace)
      local _, e = pcall(function() sandbox.open{program = SEED, worksapce = h.tempdir()} end)
      assert.matches("sandbox_spec%.lua:%d+: sandbox%.open: unknown option `worksapce` %(known: program, "
        .. "profile, workspace, .*on_progress%)$", e)
      assert.has_error(function() sb:exec{"a", time_out = 3} end, 'sandbox: exec: unknown option "time_out"')
      assert.has_error(function() sb:exec{"a", timeout = "3"} end,
        "sandbox: exec: option timeout must be a number, got string")
      assert.has_error(function() sb:spawn{"a", env = {A = 1}} end,
        "sandbox: spawn: env must map strings to strings (bad entry A)")
    end)
  end)

  describe("with the fault provider", function()
    local ws, sb
    before_each(function()
      ws = h.tempdir()
      sb = sandbox.open{program = FAULT, workspace = ws}
    end)

    it("captures exec output from the events, capped per stream as the provider would cap it", function()
      -- the fixture's result copy ignores max_output_bytes and always holds
      -- the whole output: only a capture built from the events is capped
      local r = sb:exec{"hello", "world", max_output_bytes = 5}
      assert.same({"hello", true, "", nil}, {r.stdout, r.stdout_truncated, r.stderr, r.stderr_truncated})
      assert.equal(0, params_of(ws, "exec").max_output_bytes)   -- no copy asked of the provider
      r = sb:exec{"hello", "world", max_output_bytes = 11}
      assert.same({"hello world", nil}, {r.stdout, r.stdout_truncated})
      r = sb:exec{"hello", "world", max_output_bytes = 0}
      assert.same({"", true}, {r.stdout, r.stdout_truncated})
      assert.has_error(function() sb:exec{"x", max_output_bytes = -1} end,
        "sandbox: exec: option max_output_bytes must be a non-negative integer, got -1")
      assert.has_error(function() sb:exec{"x", max_output_bytes = 1.5} end,
        "sandbox: exec: option max_output_bytes must be a non-negative integer, got 1.5")
    end)

    it("sends timeouts and capture = false where the session announces them", function()
      local seen = {}
      local r = sb:exec{"x", timeout = 5, idle_timeout = 0.25, capture = false,
                        on_stdout = function(c) seen[#seen + 1] = c end}
      assert.is_nil(r.stdout)
      local p = params_of(ws, "exec")
      assert.same({5000, 250, 0}, {p.timeout_ms, p.idle_timeout_ms, p.max_output_bytes})
    end)

    it("sends the command's argv, cwd, env and stdin as the protocol says", function()
      local odd = 'quote " back \\ slash / tab \t nl \n ctl \1 utf8 \u{e9}'
      sb:exec{"echo", odd, cwd = "sub/" .. odd, env = {A = "1", [odd] = odd}, stdin = "\0\1\255"}
      local p = params_of(ws, "exec")
      assert.same({"echo", odd}, p.argv)
      assert.equal("sub/" .. odd, p.cwd)
      assert.same({A = "1", [odd] = odd}, p.env)
      assert.equal("AAH/", p.stdin_base64)
      assert.equal("fault_1", p.session.id)
      sb:exec{"plain"}
      local plain = h.requests(ws)
      plain = plain[#plain].params
      assert.same({null, null, null}, {plain.cwd, plain.env, plain.stdin_base64})
    end)

    it("refuses a NUL byte where the OS takes none, naming where it is", function()
      assert.has_error(function() sb:exec{"a\0b"} end, "sandbox: exec: an argv string contains a NUL byte")
      assert.has_error(function() sb:exec{"a", cwd = "x\0"} end, "sandbox: exec: cwd contains a NUL byte")
      assert.has_error(function() sb:spawn{"a", env = {A = "\0"}} end, "sandbox: spawn: an env value contains a NUL byte")
      assert.has_error(function() sb:exec{"a", [0] = "x"} end,
        "sandbox: exec: argv must be a list of strings (found key 0 after its end)")
      assert.has_error(function() sb.exec{"a"} end,
        "sandbox: exec: expected a session (did you use '.' instead of ':'?)")
      assert.equal("ok", sb:exec{"ok", stdin = "a\0b"}.stdout)  -- stdin is bytes: NUL is fine
    end)

    it("fails a request on an unknown event type, in the original's words", function()
      local e = h.catch(sb.exec, sb, {"unknown_event"})
      assert.equal("failed to run sandbox command `unknown_event`: protocol: unknown sandbox exec event type `bogus`",
        tostring(e))
      assert.equal("x", sb:exec{"x"}.stdout)   -- the connection still serves
    end)

    it("decodes long output events", function()
      local chunks = {}
      sb:exec{"big", "3000", on_stdout = function(c) chunks[#chunks + 1] = c end}
      assert.same({string.rep("\255\255\128", 3000)}, chunks)
    end)

    it("lets a callback make requests of its own while its exec is in flight", function()
      local seen = {}
      sb:write_file("f", "content")
      sb:exec{"interleave", "D", "3", "0.01", on_stdout = function(c)
        seen[#seen + 1] = c .. sb:read_file("f")
      end}
      assert.same({"D 1\ncontent", "D 2\ncontent", "D 3\ncontent"}, seen)
    end)

    it("runs callbacks in the waiting task, in order", function()
      local t
      local seen = {}
      t = task.spawn(function()
        return sb:exec{"interleave", "C", "3", "0",
          on_event = function(ev) seen[#seen + 1] = {ev.type, task.current() == t} end}
      end)
      t:join()
      assert.same({{"started", true}, {"stdout", true}, {"stdout", true}, {"stdout", true}, {"exited", true}}, seen)
    end)

    it("applies max_line_bytes given at open", function()
      local capped = sandbox.open{program = FAULT, workspace = h.tempdir(), max_line_bytes = 4096}
      assert.are_not.equal(sb:connection(), capped:connection())
      local e = h.catch(capped.exec, capped, {"long", "10000"})
      assert.is_true(errors.is(e, "protocol"), tostring(e))
      assert.matches("limit 4096 bytes", e.message)
      assert.equal("x", sb:exec{"x"}.stdout)   -- the uncapped provider is another process
    end)

    it("fails a request on invalid base64, in a short line or a long one", function()
      local e = h.catch(sb.exec, sb, {"bad_base64"})
      assert.is_true(errors.is(e, "protocol"), tostring(e))
      assert.matches("sandbox exec event contained invalid base64 data: invalid base64 at offset 0", e.message)
      e = h.catch(sb.exec, sb, {"bad_base64", "5000"})   -- decoded from the line by smol.jsonl, then not
      assert.is_true(errors.is(e, "protocol"), tostring(e))
      assert.matches("sandbox exec event contained invalid base64 data: invalid base64 at offset 20000", e.message)
    end)

    it("keeps a deadline the session cannot keep itself: the command is killed through the session", function()
      local slow = sandbox.open{program = FAULT, workspace = h.tempdir(), profile = "fault/no_timeout"}
      local t0 = core.now()
      local r = slow:exec{"hang", timeout = 0.2}
      assert.equal("wall", r.timed_out)
      assert.is_false(r.ok)
      assert.equal("KILL", r.signal)
      assert.is_true(core.now() - t0 < 10)
      local e = h.catch(slow.exec, slow, {"hang", idle_timeout = 1})
      assert.is_true(errors.is(e, "unsupported"), tostring(e))
      slow:close()
    end)

    it("fails every request in flight when the provider crashes; the next open starts a fresh one", function()
      local old = sandbox.connection(FAULT)
      local hang = task.spawn(function() return sb:exec{"hang"} end)
      assert.is_true(h.wait_until(function() return old:in_use() end))
      local t0 = core.now()
      local e1 = h.catch(sb.exec, sb, {"crash", "7"})
      local e2 = h.catch(hang.join, hang)
      assert.is_true(core.now() - t0 < 15)   -- not left hanging (generous for a loaded machine)
      for _, e in ipairs{e1, e2} do
        assert.is_true(errors.is(e, "provider_exited"), tostring(e))
        assert.matches("exited with status 7", e.message)
        assert.matches(FAULT:gsub("%p", "%%%0"), e.message)
      end
      assert.is_true(errors.is(h.catch(sb.read_file, sb, "a"), "provider_exited"))
      sb:close()   -- its provider is gone: nothing to do, no error
      local fresh = sandbox.open{program = FAULT, workspace = h.tempdir()}
      assert.are_not.equal(old, fresh:connection())
      assert.are_not.equal(old.pid, fresh:connection().pid)
      assert.equal("x", fresh:exec{"x"}.stdout)
    end)

    it("reports a protocol error for a line that is not JSON, then starts afresh", function()
      local e = h.catch(sb.exec, sb, {"not_json"})
      assert.is_true(errors.is(e, "protocol"), tostring(e))
      assert.matches("sent a line that is not valid JSON", tostring(e))
      local fresh = sandbox.open{program = FAULT, workspace = h.tempdir()}
      assert.equal("x", fresh:exec{"x"}.stdout)
    end)

    it("reports a protocol error for a reply to an unknown id", function()
      local e = h.catch(sb.exec, sb, {"unknown_id"})
      assert.is_true(errors.is(e, "protocol"), tostring(e))
      assert.matches("unknown request id 999999", e.message)
    end)

    it("raises provider errors with the operation and path as context", function()
      local e = h.catch(sb.read_file, sb, "dir/a.bin")
      assert.equal("failed to read sandbox file `dir/a.bin`: not_found: no such file: dir/a.bin", tostring(e))
    end)

    it("sends kill for the process of a cancelled exec", function()
      local t = task.spawn(function() return sb:exec{"hang"} end)
      assert.is_true(h.wait_until(function() return params_of(ws, "exec") ~= nil end))
      task.sleep(0.05)
      t:cancel("enough")
      local e = h.catch(t.join, t)
      assert.equal("cancelled", e.code)
      assert.is_true(h.wait_until(function() return params_of(ws, "kill") ~= nil end))
      local kill = params_of(ws, "kill")
      assert.same({"hang_1", "KILL", sb.id}, {kill.process_id, kill.signal, kill.session.id})
    end)

    it("never mixes the events of concurrent requests", function()
      local got = {A = {}, B = {}}
      local function run(tag)
        return function()
          return sb:exec{"interleave", tag, "5", "0.02",
            on_stdout = function(c) table.insert(got[tag], c) end}.stdout
        end
      end
      local out = task.all{run("A"), run("B")}
      for i, tag in ipairs{"A", "B"} do
        assert.same({tag .. " 1\n", tag .. " 2\n", tag .. " 3\n", tag .. " 4\n", tag .. " 5\n"}, got[tag])
        assert.equal(table.concat(got[tag]), out[i])
      end
    end)
  end)

  describe("open's deadline", function()
    -- Runs open in a task; returns the task and the connection it uses.
    local function open_in_task(opts)
      local t = task.spawn(sandbox.open, opts)
      assert.is_true(h.wait_until(function() return sandbox.connection(FAULT) ~= nil end))
      return t, sandbox.connection(FAULT)
    end

    it("fails with a timeout naming the program and the deadline, and stops a provider nobody else uses", function()
      local t0 = core.now()
      local t, conn = open_in_task{program = FAULT, profile = "fault/hang_open", workspace = h.tempdir(),
                                   open_timeout = 0.3}
      local e = h.catch(t.join, t)
      assert.is_true(core.now() - t0 < 15, "open was not bounded")
      assert.is_true(errors.is(e, "timeout"), tostring(e))
      assert.equal(("failed to open sandbox session with provider `%s`: timeout: provider `%s` "
        .. "did not answer `open` within 0.3 s"):format(FAULT, FAULT), tostring(e))
      assert.same({"open", FAULT, FAULT}, {e.op, e.path, e.program})
      -- stopped before open returned, and no longer pooled
      assert.is_not_nil(conn.exit_code)
      assert.is_false(h.alive(conn.pid))
      assert.same({}, sandbox.connections())
    end)

    it("has a module default", function()
      local saved = sandbox.open_timeout
      sandbox.open_timeout = 0.2
      local e = h.catch(sandbox.open, {program = FAULT, profile = "fault/hang_open", workspace = h.tempdir()})
      sandbox.open_timeout = saved
      assert.is_true(errors.is(e, "timeout"), tostring(e))
      assert.matches("within 0%.2 s$", e.message)
      assert.has_error(function() sandbox.open{program = FAULT, open_timeout = 0} end,
        "sandbox.open: option open_timeout must be a positive number of seconds")
    end)

    it("keeps a provider that serves other sessions, and closes the session it answers late", function()
      local other = sandbox.open{program = FAULT, workspace = h.tempdir()}
      local conn = sandbox.connection(FAULT)
      local late_ws = h.tempdir()
      local e = h.catch(sandbox.open, {program = FAULT, profile = "fault/late_open 1", workspace = late_ws,
                                       open_timeout = 0.2})
      assert.is_true(errors.is(e, "timeout"), tostring(e))
      assert.is_true(conn:alive())
      assert.equal("x", other:exec{"x"}.stdout)
      assert.is_true(h.wait_until(function() return params_of(late_ws, "close") ~= nil end))
      assert.matches("^late_%d+$", params_of(late_ws, "close").id)
      assert.is_true(conn:alive())
      other:close()
    end)
  end)

  it("names the bundled provider by its name in the context, keeping the path in the fields", function()
    local bundled = core.bundled_provider()
    if not bundled then return pending("not built: no smolwf-provider next to smolwf") end
    local e = h.catch(sandbox.open, {program = bundled, workspace = "/nonexistent/smolwf-spec-ws"})
    assert.is_true(errors.is(e, "not_found"), tostring(e))
    assert.matches("^failed to open sandbox session with provider `smolwf%-provider`: not_found: .*"
      .. "/nonexistent/smolwf%-spec%-ws", tostring(e))
    assert.same({bundled, bundled}, {e.path, e.program})
  end)

  it("fails clearly at open when the provider program does not exist", function()
    local e = h.catch(sandbox.open, {program = "/nonexistent/smol-provider"})
    assert.is_true(errors.is(e, "not_found"), tostring(e))
    assert.matches("provider `/nonexistent/smol%-provider`", tostring(e))
  end)

  it("bounds the exit-time close and shutdown of a provider that stopped answering", function()
    local ws = h.tempdir()
    local t0 = core.now()
    local out = h.run_host(([[
      local sandbox = require("smol.sandbox")
      sandbox.exit_grace = 0.3
      local sb = sandbox.open{program = %q, workspace = %q}
      sb:exec{"deaf"}
      print("pid", sb:connection().pid)]]):format(FAULT, ws))
    -- unbounded, the exit would wait for the deaf provider until run_host's
    -- `timeout 20` kills it; 15 s leaves a loaded machine room
    assert.is_true(core.now() - t0 < 15, "exit took too long")
    local pid = assert(tonumber(out:match("pid\t(%d+)")), out)
    assert.same({"open", "exec", "close", "shutdown"}, h.methods(ws))
    assert.is_false(h.alive(pid))
  end)

  it("starts $SMOLWF_PROVIDER when no program is named", function()
    local out, status = h.run_host(([[
      local sb = require("smol.sandbox").open{workspace = %q}
      print(sb.id, sb:connection().program)]]):format(h.tempdir()), {SMOLWF_PROVIDER = FAULT})
    assert.equal(0, status, out)
    assert.equal("fault_1\t" .. FAULT .. "\n", out)
  end)

  it("closes sessions and shuts providers down when the host exits", function()
    local ws = h.tempdir()
    local out, status = h.run_host(([[
      local sb = require("smol.sandbox").open{program = %q, workspace = %q}
      print("pid", sb:connection().pid)]]):format(FAULT, ws))
    assert.equal(0, status, out)
    local pid = assert(tonumber(out:match("pid\t(%d+)")), out)
    assert.same({"open", "close", "shutdown"}, h.methods(ws))
    assert.is_false(h.alive(pid))
  end)

  -- The same behaviour from every provider we have: the fault fixture
  -- (part 1 only, canned commands) and the bundled one (real commands).
  local providers = {
    {name = "the fault fixture", program = FAULT,
     interleave = function(tag) return {"interleave", tag, "5", "0.02"} end,
     meet = function(ws, mine, theirs) return {"meet", ws .. "/" .. mine, ws .. "/" .. theirs} end},
  }
  -- The bundled provider with its default profile (auto: bwrap where it
  -- works) and with local/default (no namespaces).
  for _, profile in ipairs{"auto/default", "local/default"} do
    providers[#providers + 1] = {name = "the bundled provider, " .. profile, profile = profile,
      program = core.bundled_provider(), real = true,
      interleave = function(tag)
        return {"sh", "-c", ("for i in 1 2 3 4 5; do echo %s $i; sleep 0.02; done"):format(tag)}
      end,
      meet = function(_, mine, theirs) return h.meet_argv(mine, theirs) end}
  end
  -- sandbox.host{}: the same session class, served on this machine.
  providers[#providers + 1] = {name = "sandbox.host{}", host = true, program = true, real = true,
    interleave = function(tag)
      return {"sh", "-c", ("for i in 1 2 3 4 5; do echo %s $i; sleep 0.02; done"):format(tag)}
    end,
    meet = function(_, mine, theirs) return h.meet_argv(mine, theirs) end}
  for _, prov in ipairs(providers) do
    describe("against " .. prov.name, function()
      local sb, ws
      before_each(function()
        if not prov.program then return end
        ws = h.tempdir()
        if prov.host then sb = sandbox.host{cwd = ws} return end
        sb = sandbox.open{program = prov.program, profile = prov.profile, workspace = ws}
      end)
      after_each(function() if sb then sb:close() end end)

      -- Only providers that run real commands get these.
      local function it_real(name, fn)
        if not prov.real then return end
        it(name, function()
          if not prov.program then return pending("not built: no smolwf-provider next to smolwf") end
          fn()
        end)
      end
      local function it_any(name, fn)
        it(name, function()
          if not prov.program then return pending("not built: no smolwf-provider next to smolwf") end
          fn()
        end)
      end

      it_any("reports misuse at the caller's line, naming what was wrong", function()
        local _, e = pcall(function() sb:exec{"true", time_out = 1} end)
        assert.matches('sandbox_spec%.lua:%d+: sandbox: exec: unknown option "time_out"', e)
        _, e = pcall(function() sb:exec{"echo", 42} end)
        assert.matches("sandbox_spec%.lua:%d+: sandbox: exec: argv%[2%] must be a string", e)
        _, e = pcall(function() sb:read_file("x", 5) end)
        assert.matches("sandbox_spec%.lua:%d+: bad argument #2 to 'read_file' %(table of options expected, got number%)", e)
        _, e = pcall(function() sb.exec{"true"} end)
        assert.matches("sandbox_spec%.lua:%d+: sandbox: exec: expected a session", e)
      end)

      it_any("gives a quiet exec (no callbacks) the same result as one that watches its events", function()
        local seen = {}
        local watched = sb:exec{"sh", "-c", "echo out; echo err >&2; exit 3",
          on_event = function(ev) seen[#seen + 1] = ev.type end}
        local quiet = sb:exec{"sh", "-c", "echo out; echo err >&2; exit 3"}
        for _, r in ipairs{watched, quiet} do
          assert.equal(watched.exit_code, r.exit_code)
          assert.is_string(r.process_id)
        end
        assert.same({watched.stdout, watched.stderr}, {quiet.stdout, quiet.stderr})
        if prov.real then   -- the fault fixture's commands are canned
          assert.same({3, false}, {quiet.exit_code, quiet.ok})
          assert.same({"out\n", "err\n"}, {quiet.stdout, quiet.stderr})
        end
        assert.equal("started", seen[1])
        assert.equal("exited", seen[#seen])
      end)

      it_any("reads a file as one value, as Lua's readers do", function()
        sb:write_file("n", "42")
        assert.equal(42, tonumber(sb:read_file("n")))
        assert.equal(1, select("#", sb:read_file("n")))
      end)

      it_any("runs two execs in two tasks at once", function()
        -- each waits for the other to start: one after the other, the first gives up
        local rs = task.all{function() return sb:exec(prov.meet(ws, "a", "b")) end,
                            function() return sb:exec(prov.meet(ws, "b", "a")) end}
        assert.same({0, 0}, {rs[1].exit_code, rs[2].exit_code})
      end)

      it_any("delivers concurrent requests' events to their own callbacks, in order", function()
        local got = {A = {}, B = {}}
        local function run(tag)
          return function()
            local spec = prov.interleave(tag)
            spec.on_stdout = function(c) got[tag][#got[tag] + 1] = c end
            return sb:exec(spec).stdout
          end
        end
        local out = task.all{run("A"), run("B")}
        for i, tag in ipairs{"A", "B"} do
          assert.equal(tag .. " 1\n" .. tag .. " 2\n" .. tag .. " 3\n" .. tag .. " 4\n" .. tag .. " 5\n",
            table.concat(got[tag]))
          assert.equal(table.concat(got[tag]), out[i])
        end
      end)

      it_any("round-trips binary file content", function()
        local all = {}
        for i = 0, 255 do all[#all + 1] = string.char(i) end
        all = table.concat(all)
        sb:write_file("bin.dat", all)
        assert.equal(all, sb:read_file("bin.dat"))
        sb:write_file("empty", "")
        assert.equal("", sb:read_file("empty"))
      end)

      it_any("raises not_found for a missing file", function()
        local e = h.catch(sb.read_file, sb, "no/such/file")
        assert.is_true(errors.is(e, "not_found"), tostring(e))
        assert.matches("^failed to read sandbox file `no/such/file`: not_found: ", tostring(e))
      end)

      it_real("returns exit code, stdout and stderr as data", function()
        local r = sb:exec{"sh", "-c", "echo hi; echo err >&2; exit 3"}
        assert.same({3, "hi\n", "err\n", false}, {r.exit_code, r.stdout, r.stderr, r.ok})
      end)

      it_real("passes env, cwd and stdin", function()
        sb:create_dir_all("sub/dir")
        local r = sb:exec{"sh", "-c", 'printf "%s:" "$A"; pwd; cat', cwd = "sub/dir", env = {A = "1"}, stdin = "\0\1in"}
        assert.equal(0, r.exit_code)
        assert.matches("^1:/.*sub/dir\n\0\1in$", r.stdout)
      end)

      it_real("creates and removes directories and temp dirs", function()
        sb:create_dir_all("x/y/z")
        sb:write_file("x/y/z/f", "data")
        sb:remove("x")
        assert.is_true(errors.is(h.catch(sb.read_file, sb, "x/y/z/f"), "not_found"))
        local tmp = sb:create_temp_dir("build-")
        assert.matches("build%-", tmp)
        sb:write_file(tmp .. "/t", "t")
        assert.equal("t", sb:read_file(tmp .. "/t"))
      end)

      it_real("spawns, writes to, waits for and kills processes", function()
        local p = sb:spawn{"cat"}
        p:write("abc")
        p:close_stdin()
        local r = p:wait()
        assert.same({0, "abc"}, {r.exit_code, r.stdout})
        local q = sb:spawn{"sleep", "30"}
        q:kill("KILL")
        local rq = q:wait()
        assert.equal(137, rq.exit_code)
      end)

      it_real("streams output with capture off and keeps no copy", function()
        local n = 0
        local r = sb:exec{"sh", "-c", "head -c 3000000 /dev/zero", capture = false,
                          on_stdout = function(c) n = n + #c end}
        assert.equal(3000000, n)
        assert.is_nil(r.stdout)
        assert.is_nil(r.stdout_truncated)   -- nothing kept on purpose is not "truncated"
      end)

      it_real("captures output from the events: exact bytes, capped per stream, no copy in the result", function()
        local r = sb:exec{"sh", "-c", "printf 0123456789; printf abc >&2", max_output_bytes = 4}
        assert.same({"0123", true, "abc", nil}, {r.stdout, r.stdout_truncated, r.stderr, r.stderr_truncated})
        r = sb:exec{"sh", "-c", "printf 0123456789", max_output_bytes = 10}
        assert.same({"0123456789", nil}, {r.stdout, r.stdout_truncated})
        local lines = {}
        local remove = jsonl.observe(function(dir, _, line)
          if dir == "send" and line:find('"method":"exec"', 1, true) then lines.exec = line end
          if dir == "recv" and line:find('"result"', 1, true) then lines.result = line end
        end)
        local ok, big = pcall(sb.exec, sb, {"sh", "-c", "head -c 3000000 /dev/zero"})
        remove()
        assert(ok, tostring(big))
        assert.equal(string.rep("\0", 3000000), big.stdout)
        assert.matches('"max_output_bytes":0', lines.exec)
        assert.is_true(#lines.result < 1000, "the result carried a copy: " .. #lines.result .. " bytes")
      end)

      it_real("hands long binary output over intact, and plain event tables to on_event", function()
        local want = {}
        for i = 1, 300000 do want[i] = string.char((i * 7) % 256) end
        want = table.concat(want)
        local parts, events = {}, 0
        local r = sb:exec{"cat", stdin = want, on_stdout = function(c) parts[#parts + 1] = c end,
          on_event = function(ev)
            if ev.type ~= "stdout" then return end
            events = events + 1
            for k in pairs(ev) do assert.equal("string", type(k)) end
            assert.equal(ev.data, core.b64decode(ev.data_base64))
          end}
        assert.equal(want, table.concat(parts))
        assert.equal(want, r.stdout)
        assert.is_true(events >= 1)
      end)

      it_real("kills the process of a cancelled exec", function()
        local t = task.spawn(function()
          return sb:exec{"sh", "-c", "echo $$ > pid; exec sleep 30"}
        end)
        local pid
        assert.is_true(h.wait_until(function()
          local ok, text = pcall(sb.read_file, sb, "pid")
          pid = ok and text:match("%d+\n") or nil
          return pid ~= nil
        end))
        pid = pid:match("%d+")
        t:cancel()
        assert.equal("cancelled", h.catch(t.join, t).code)
        assert.is_true(h.wait_until(function()
          return sb:exec{"sh", "-c", "kill -0 " .. pid .. " 2>/dev/null"}.exit_code ~= 0
        end))
      end)

      it_real("reports wall timeouts", function()
        local r = sb:exec{"sleep", "10", timeout = 0.2}
        assert.equal("wall", r.timed_out)
        assert.is_false(r.ok)
      end)
    end)
  end
end)
