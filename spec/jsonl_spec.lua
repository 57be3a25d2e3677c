-- smol.jsonl: one provider connection, multiplexing, faults, observers.
-- Runs inside the host: /path/to/smolwf /usr/bin/busted --ignore-lua spec/jsonl_spec.lua
local jsonl = require "smol.jsonl"
local task = require "smol.task"
local errors = require "smol.errors"
local h = dofile("spec/fixtures/helpers.lua")
local null = require("cjson").null

local SEED = h.fixture("seed_provider.lua")
local FAULT = h.fixture("fault_provider.lua")

describe("smol.jsonl", function()
  local conns, ws

  -- Starts a connection that after_each shuts down and checks for leaks.
  local function start(program, opts)
    local conn = jsonl.start(program, opts)
    conns[#conns + 1] = conn
    return conn
  end

  local function open(conn)
    return conn:request("open", {metadata = {request_id = "r", sandbox_group_id = "g"},
      profile = {provider = "fake", name = "test"}, workspace_sync = {host_path = ws}, cwd = null})
  end

  local handles
  before_each(function()
    conns, ws = {}, h.tempdir()
    handles = require("smol.core").open_handles()
  end)

  after_each(function()
    jsonl.observe(nil)
    for _, c in ipairs(conns) do
      c:shutdown(2)
      assert.is_false(h.alive(c.pid), "provider " .. c.pid .. " left running")
    end
    h.cleanup()
    local core = require "smol.core"
    assert.is_true(h.handles_back_to(handles), "uv handles left open: " .. core.open_handles() .. " > " .. handles)
  end)

  it("round-trips a request and gets the session", function()
    local conn = start(SEED)
    local session = open(conn)
    assert.same({id = "session_1", cwd = "/sandbox", capabilities = {exec = true}}, session)
    assert.equal(0, conn:shutdown(2))
    assert.same({"open", "shutdown"}, h.methods(ws))
  end)

  it("delivers a request's events in order, then its result", function()
    local conn = start(SEED)
    local seen = {}
    local r = conn:request("exec", {argv = {"x"}}, function(ev) seen[#seen + 1] = ev.type end)
    assert.same({"started", "stdout", "exited"}, seen)
    assert.equal("AAH/", r.stdout_base64)
  end)

  it("multiplexes requests from many tasks over one connection", function()
    local conn = start(FAULT)
    open(conn)
    local fns = {}
    for i = 1, 20 do
      fns[i] = function() return conn:request("exec", {argv = {"echo", tostring(i)}}).stdout_base64 end
    end
    local results = task.all(fns)
    for i = 1, 20 do
      assert.equal(require("smol.core").b64encode("echo " .. i), results[i])
    end
  end)

  it("takes long payloads out of event lines intact, escaped or not", function()
    local conn = start(FAULT)
    open(conn)
    local got
    conn:request("exec", {argv = {"big", "5000"}}, function(ev) got = ev end)
    assert.equal("stdout", got.type)
    assert.equal(string.rep("//+A", 5000), got.data_base64)
  end)

  it("decodes a long unescaped payload straight from its line; its text stays readable", function()
    local core = require "smol.core"
    local conn = start(core.bundled_provider())
    local session = conn:request("open", {metadata = {request_id = "r", sandbox_group_id = "g"},
      profile = {provider = "local", name = "default"}, workspace_sync = {host_path = ws}, cwd = null})
    local want = {}
    for i = 1, 30000 do want[i] = string.char(i % 256) end
    want = table.concat(want)
    local f = assert(io.open(ws .. "/data.bin", "wb"))
    f:write(want)
    f:close()
    local parts, split = {}, 0
    conn:request("exec", {session = session, argv = {"cat", ws .. "/data.bin"}, cwd = null, env = null,
      stdin_base64 = null}, function(ev)
        if ev.type ~= "stdout" then return end
        local bytes = ev.data
        if rawget(ev, "data_base64") == nil then
          split = split + 1
          assert.equal(core.b64encode(bytes), ev.data_base64)   -- made on demand
        else
          assert.equal(core.b64decode(ev.data_base64), bytes)
        end
        parts[#parts + 1] = bytes
      end)
    conn:request("close", {session = session})
    assert.equal(want, table.concat(parts))
    assert.is_true(split >= 1, "no event was decoded from its line")
  end)

  it("raises the provider's error as a structured value", function()
    local conn = start(FAULT)
    open(conn)
    local e = h.catch(conn.request, conn, "read_file", {path = "missing"})
    assert.is_true(errors.is(e, "not_found"))
    assert.matches("no such file: missing", e.message)
    assert.equal("read_file", e.method)
  end)

  it("tells every observer each line sent and received, and the exit", function()
    local seen = {}
    jsonl.observe(function(dir, info, what) seen[#seen + 1] = {dir, info.program, what} end)
    local conn = start(SEED)
    open(conn)
    conn:shutdown(2)
    assert.equal("send", seen[1][1])
    assert.matches('"method":"open"', seen[1][3])
    assert.equal("recv", seen[2][1])
    assert.matches('"session_1"', seen[2][3])
    assert.same({"exit", SEED, 0}, seen[#seen])
    assert.equal(5, #seen)
  end)

  it("keeps several observers, each removed on its own, even from inside a call", function()
    local first, second, third = {}, {}, {}
    local remove_first = jsonl.observe(function(dir) first[#first + 1] = dir end)
    local remove_second
    remove_second = jsonl.observe(function(dir)
      second[#second + 1] = dir
      remove_second()   -- removes itself mid-notification: the others still run
    end)
    jsonl.observe(function(dir) third[#third + 1] = dir end)
    local conn = start(SEED)
    open(conn)
    remove_first()
    remove_first()      -- idempotent
    conn:shutdown(2)
    assert.same({"send", "recv"}, first)
    assert.same({"send"}, second)
    assert.equal(5, #third)
    assert.has_error(function() jsonl.observe("no") end,
      "bad argument #1 to 'jsonl.observe' (function or nil expected, got string)")
  end)

  it("lets a recording and another observer watch the same lines", function()
    local record = require "smol.recording.record"
    local path = ws .. "/rec.jsonl"
    local seen = 0
    jsonl.observe(function() seen = seen + 1 end)
    local rec = record.start(path)
    local conn = start(SEED)
    open(conn)
    conn:shutdown(2)
    rec:stop()
    assert.equal(5, seen)
    local lines = 0
    for _ in io.lines(path) do lines = lines + 1 end
    assert.equal(1 + 5, lines)   -- the header, then every line and the exit
  end)

  describe("faults", function()
    it("fails every pending request when the provider exits, naming it and its status", function()
      local conn = start(FAULT)
      open(conn)
      local hang = task.spawn(function() return conn:request("exec", {argv = {"hang"}}) end)
      assert.is_true(h.wait_until(function() return conn:in_use() end))
      local crash = h.catch(conn.request, conn, "exec", {argv = {"crash", "3"}})
      local e2 = h.catch(hang.join, hang)
      for _, e in ipairs{crash, e2} do
        assert.is_true(errors.is(e, "provider_exited"), tostring(e))
        assert.equal(FAULT, e.program)
        assert.matches("provider `" .. FAULT:gsub("%p", "%%%0") .. "` exited with status 3", e.message)
      end
      assert.is_false(conn:alive())
      local later = h.catch(conn.request, conn, "read_file", {path = "x"})
      assert.is_true(errors.is(later, "provider_exited"))
    end)

    it("gives up a connection: pending requests fail with the given error, the provider is stopped", function()
      local conn = start(FAULT)
      open(conn)
      local hang = task.spawn(function() return conn:request("exec", {argv = {"hang"}}) end)
      assert.is_true(h.wait_until(function() return conn:in_use() end))
      local why = errors.new{code = "timeout", message = "enough"}
      conn:give_up(why, "took too long")
      assert.equal(why, h.catch(hang.join, hang))
      conn:wait_exit()
      assert.is_false(h.alive(conn.pid))
      assert.equal(why, h.catch(conn.request, conn, "read_file", {path = "x"}))
    end)

    it("hands the late terminal line of a request given up on to its on_late", function()
      local conn = start(FAULT)
      open(conn)
      local late
      local e = h.catch(conn.request, conn, "exec", {argv = {"sleep", "0.3"}}, nil,
        {timeout = 0.05, on_late = function(msg) late = msg end})
      assert.is_true(errors.is(e, "timeout"), tostring(e))
      assert.matches("did not answer `exec` within 0.05 s", e.message)
      assert.is_true(h.wait_until(function() return late ~= nil end))
      assert.equal(0, late.result.exit_code)
      assert.is_true(conn:alive())
    end)

    it("reports a provider that died halfway through a line as exited", function()
      local conn = start(FAULT)
      open(conn)
      local e = h.catch(conn.request, conn, "exec", {argv = {"cut"}})
      assert.is_true(errors.is(e, "provider_exited"), tostring(e))
      assert.matches("exited with status 1 %(after it sent a line that is not valid JSON", e.message)
    end)

    local function broken(argv, pattern, opts)
      local conn = start(FAULT, opts)
      open(conn)
      local e = h.catch(conn.request, conn, "exec", {argv = argv})
      assert.is_true(errors.is(e, "protocol"), tostring(e))
      assert.matches(pattern, e.message)
      assert.is_false(conn:alive())
      assert.is_true(h.wait_until(function() return conn.exit_code ~= nil end))
    end

    it("breaks the connection on a line that is not JSON", function()
      broken({"not_json"}, "sent a line that is not valid JSON")
    end)

    it("breaks the connection on a reply for an unknown id", function()
      broken({"unknown_id"}, "sent a reply for unknown request id 999999")
    end)

    it("breaks the connection on an error reply without an id", function()
      broken({"null_id"}, "without an id %(invalid_request: bad line%)")
    end)

    -- Lines a lenient decoder would read as something else than was written.
    describe("refuses a reply line that does not mean exactly what it says", function()
      local RESULT = '{"id":ID,"result":{"exit_code":0,"stdout_base64":"","stderr_base64":""}}'

      it("a key twice in one object (top level or nested), naming the key", function()
        broken({"raw", '{"id":ID,"result":{"exit_code":1},"result":{"exit_code":0}}'},
          "provider `.*` sent a line with the key `result` twice in one object")
        broken({"raw", '{"id":ID,"result":{"exit_code":0,"exit_code":1,"stdout_base64":""}}'},
          "sent a line with the key `exit_code` twice in one object")
        broken({"raw", '{"id":ID,"id":ID,"result":{}}'}, "the key `id` twice")
      end)

      it("an id beyond 2^53, which would be read as a neighbour", function()
        broken({"raw", '{"id":9007199254740993,"result":{}}'},
          "sent an id that is not an integer of magnitude below 2%^53 %(read as 9007199254740992%)")
        broken({"raw", '{"id":1.5,"result":{}}'}, "not an integer of magnitude below 2%^53 %(read as 1.5%)")
      end)

      it("an escaped NUL where the host would read the string cut at it", function()
        broken({"raw", '{"id":ID,"event":{"type":"stdout\\u0000x","data_base64":"aGk="}}', RESULT},
          "sent an event holding \\u0000 %(NUL%)")
        broken({"raw", '{"id":ID,"result\\u0000x":{"exit_code":0}}'},
          "sent a key or an id holding \\u0000 %(NUL%)")
      end)

      it("two objects on one line, or text after the object", function()
        broken({"raw", RESULT .. RESULT}, "sent text after the JSON value %(at byte %d+ of %d+%): one message per line")
        broken({"raw", RESULT .. " x"}, "sent text after the JSON value")
      end)

      it("fails every request in flight, and leaves nothing running", function()
        local conn = start(FAULT)
        open(conn)
        local hang = task.spawn(function() return conn:request("exec", {argv = {"hang"}}) end)
        assert.is_true(h.wait_until(function() return conn:in_use() end))
        local e = h.catch(conn.request, conn, "exec", {argv = {"raw", '{"id":ID,"result":{},"result":{}}'}})
        assert.is_true(errors.is(e, "protocol"), tostring(e))
        local e2 = h.catch(hang.join, hang)
        for _, err in ipairs{e, e2} do
          assert.is_true(errors.is(err, "protocol"), tostring(err))
          assert.matches("the key `result` twice", err.message)
        end
        assert.is_true(h.wait_until(function() return conn.exit_code ~= nil end))
        assert.is_false(h.alive(conn.pid))
      end)
    end)

    it("caps the nesting depth", function()
      broken({"deep", "40"}, "too many nested", {max_depth = 16})
    end)

    it("accepts nesting within the cap", function()
      local conn = start(FAULT, {max_depth = 64})
      open(conn)
      local r = conn:request("exec", {argv = {"deep", "40"}})
      assert.equal("table", type(r.x))
    end)

    it("caps the line length", function()
      broken({"long", "100000"}, "too long line %(limit 4096 bytes%)", {max_line_bytes = 4096})
    end)

    it("fails clearly when the program does not exist", function()
      local e = h.catch(jsonl.start, "/nonexistent/provider")
      assert.is_true(errors.is(e, "not_found"), tostring(e))
      assert.equal("start", e.op)
      assert.matches("failed to start provider `/nonexistent/provider`: not_found: cannot run provider", tostring(e))
    end)

    it("fails clearly when the program cannot be executed", function()
      local e = h.catch(jsonl.start, h.fixture("helpers.lua"))   -- not executable
      assert.is_true(errors.is(e, "permission_denied"), tostring(e))
      assert.matches("cannot run provider `.*helpers.lua`", e.message)
    end)

    it("times a request out and drops its late reply", function()
      local conn = start(FAULT)
      open(conn)
      local results = 0
      local remove = jsonl.observe(function(direction, _, line)
        if direction == "recv" and line:find('"result"', 1, true) then results = results + 1 end
      end)
      finally(remove)
      local e = h.catch(conn.request, conn, "exec", {argv = {"sleep", "0.3"}}, nil, {timeout = 0.05})
      assert.is_true(errors.is(e, "timeout"), tostring(e))
      assert.matches("did not answer `exec` within 0.05 s", e.message)
      -- the late result arrives for an abandoned id: dropped, connection fine
      assert.is_true(h.wait_until(function() return results == 1 end))
      assert.is_true(conn:alive())
      assert.equal("fault_2", open(conn).id)
    end)

    it("fails a request whose event handler raises, and keeps the connection", function()
      local conn = start(FAULT)
      open(conn)
      local e = h.catch(conn.request, conn, "exec", {argv = {"interleave", "A", "3", "0"}},
        function() error("stop here", 0) end)
      assert.equal("stop here", e)
      assert.is_true(conn:alive())
      assert.is_false(conn:in_use())
      assert.equal("fault_2", open(conn).id)   -- its later lines were dropped
    end)

    it("passes the provider's stderr to on_stderr, and prints none of it by default", function()
      local lines = {}
      local conn = start(FAULT, {on_stderr = function(l) lines[#lines + 1] = l end})
      open(conn)
      conn:request("exec", {argv = {"stderr", "hello from the provider"}})
      conn:shutdown(2)
      assert.same({"hello from the provider"}, lines)
      local out = h.run_host(([[
        local c = require("smol.jsonl").start(%q)
        c:request("exec", {argv = {"stderr", "to our stderr"}})
        c:shutdown(2)]]):format(FAULT))
      assert.is_nil(out:find("to our stderr", 1, true), out)   -- kept for errors (provider_stderr_spec)
    end)
  end)
  -- Every line is decoded and routed by the connection in C
  -- (host/smolwf/conn.c), observed or not; short lines are parsed whole,
  -- long ones with their payload cut out first. Both must agree.
  describe("the reply path", function()
    local core = require "smol.core"

    -- exec "mixed": short and long stdout events alternately; what on_event saw.
    local function mixed_events(conn)
      local seen = {}
      conn:request("exec", {argv = {"mixed", "6000"}}, function(ev)
        local data = ev.data
        seen[#seen + 1] = ev.type .. ":" .. (data and #data > 10 and ("L" .. #data) or data or "")
      end)
      return seen
    end

    local MIXED = {"stdout:s1", "stdout:L6000", "stdout:s2", "stdout:L6000", "stdout:s3", "stdout:L6000", "exited:"}

    it("keeps a request's events in order across lines routed in C and in Lua", function()
      local conn = start(FAULT)
      open(conn)
      assert.same(MIXED, mixed_events(conn))
    end)

    it("gives observers every line, and the same events, while one is registered", function()
      local conn = start(FAULT)
      open(conn)
      local lines = 0
      local remove = jsonl.observe(function(direction) if direction == "recv" then lines = lines + 1 end end)
      assert.same(MIXED, mixed_events(conn))
      assert.equal(8, lines)  -- 7 events and the result
      remove()
      assert.same(MIXED, mixed_events(conn))
      assert.equal(8, lines)  -- no observer saw them
    end)

    it("ends a request with its result or its error: nothing stays pending or abandoned", function()
      local conn = start(FAULT)
      open(conn)
      conn:request("exec", {argv = {"x"}})
      local e = h.catch(conn.request, conn, "read_file", {path = "missing"})
      assert.equal("not_found", e.code)
      assert.is_false(conn:in_use())
    end)

    it("keeps an escaped NUL in a string (left to lua-cjson)", function()
      local conn = start(FAULT)
      open(conn)
      local r = conn:request("exec", {argv = {"nul"}})
      assert.equal("a\0b", r.note)
      assert.equal(0, r.exit_code)
    end)

    it("decodes integral numbers as integers", function()
      local conn = start(FAULT)
      open(conn)
      local r = conn:request("exec", {argv = {"x"}})
      assert.equal("integer", math.type(r.exit_code))
    end)
  end)
end)
