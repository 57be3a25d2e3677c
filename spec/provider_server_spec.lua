-- smol.provider.server and `smolwf provider serve`: a provider written in
-- Lua, run as a real process and spoken to in raw JSON Lines.
local cjson = require "cjson"
local fs = require "smol.fs"
local core = require "smol.core"
local sandbox = require "smol.sandbox"
local server = require "smol.provider.server"
local raw = require "spec.fixtures.testing_raw"

local PROBE = "spec/fixtures/lua_provider_probe.lua"

local function start(file)
  return raw.start({core.exe_path(), "provider", "serve", file or PROBE})
end

local SESSION = {id = "probe_1", cwd = "/probe", capabilities = {exec = true}}

local function open_session(p)
  p:request(0, "open", {cwd = "1"})
  local reply = p:next()
  assert.same("probe_1", reply.result.id)
end

local function stop(p)
  p:close_stdin()
  assert.same(0, (p:wait_exit()))
end

describe("provider.server framing and ids", function()
  local p
  before_each(function() p = start() end)
  after_each(function() if p then stop(p) end end)

  it("ignores blank lines and answers a line that is not JSON with id null", function()
    p:send("")
    p:send("   ")
    p:send("{not json")
    local reply = p:next()
    assert.same(cjson.null, reply.id)
    assert.same("invalid_request", reply.error.code)
    assert.matches("not valid JSON", reply.error.message)
  end)

  it("answers ids of the wrong type with id null, and keeps serving", function()
    for _, bad in ipairs{'{"id":1.5,"method":"echo"}', '{"id":true,"method":"echo"}',
                         '{"method":"echo"}', '[1,2]'} do
      p:send(bad)
      local reply = p:next()
      assert.same(cjson.null, reply.id)
      assert.same("invalid_request", reply.error.code)
    end
    p:request(7, "echo", {a = "b"})
    local reply = p:next()
    assert.same(7, reply.id)
    assert.same({a = "b"}, reply.result.params)
  end)

  it("keeps 1 and \"1\" apart and echoes big integer ids exactly", function()
    p:send('{"id":1,"method":"block","params":{"gate":"g"}}')
    p:send('{"id":"1","method":"echo","params":{}}')
    local _, line = p:next()
    assert.matches('^{"id":"1","result"', line)
    p:send('{"id":9007199254740991,"method":"release","params":{"gate":"g"}}')
    local seen = {}
    for _ = 1, 2 do
      local _, l = p:next()
      seen[#seen + 1] = l:match('^{"id":([^,]+),')
    end
    table.sort(seen)
    assert.same({"1", "9007199254740991"}, seen)
  end)

  it("refuses an id from 2^53 on (it could not be echoed exactly) with id null", function()
    p:send('{"id":9007199254740993,"method":"echo","params":{}}')
    local reply, line = p:next()
    assert.matches('^{"id":null,"error"', line)
    assert.same("invalid_request", reply.error.code)
    assert.matches("integer of magnitude below 2^53", reply.error.message, 1, true)
  end)

  -- Lines lua-cjson would read otherwise than they are written.
  it("refuses a key twice, \\u0000, and text after the request, by the request's id", function()
    for _, case in ipairs{
      {'{"id":5,"method":"echo","method":"teleport","params":{}}', 5, "duplicate key `method`"},
      {'{"id":6,"method":"echo","params":{"a":1,"a":2}}', 6, "duplicate key `a`"},
      {'{"id":7,"id":8,"method":"echo"}', cjson.null, "duplicate key `id`"},
      {'{"id":9,"method":"echo\\u0000x","params":{}}', 9, "\\u0000"},
      {'{"id":"a\\u0000b","method":"echo","params":{}}', cjson.null, "\\u0000"},
      {'{"id":10,"method":"echo","params":{}} x', 10, "text after the JSON value"},
    } do
      p:send(case[1])
      local reply = p:next()
      assert.same(case[2], reply.id, case[1])
      assert.same("invalid_request", reply.error.code, case[1])
      assert.matches(case[3], reply.error.message, 1, true)
    end
    p:send('{"id":11,"method":"echo","params":{}}{"id":12,"method":"echo","params":{}}')
    local ids = {}
    for _ = 1, 2 do
      local reply = p:next()
      assert.same("invalid_request", reply.error.code)
      ids[#ids + 1] = reply.id
    end
    assert.same({11, 12}, ids)
  end)

  it("answers a request nested deeper than its JSON decoder goes with id null, and keeps serving", function()
    p:send('{"id":14,"method":"echo","params":{"a":' .. string.rep("[", 100) .. string.rep("]", 100) .. '}}')
    local reply = p:next()
    assert.same(cjson.null, reply.id)
    assert.matches("request is not valid JSON", reply.error.message, 1, true)
    p:request(15, "echo", {})
    assert.same(15, p:next().id)
  end)

  it("answers a line that is not UTF-8 with id null, in valid UTF-8", function()
    p:send('{"id":13,"method":"echo\xff\xfe","params":{}}')
    local reply, line = p:next()
    assert.same(cjson.null, reply.id)
    assert.matches("not valid UTF-8 (byte 0xff at offset 23)", reply.error.message, 1, true)
    assert.is_not_nil(utf8.len(line))
  end)

  it("refuses an id already in flight, naming it", function()
    p:send('{"id":3,"method":"block","params":{"gate":"d"}}')
    p:send('{"id":3,"method":"echo","params":{}}')
    local reply = p:next()
    assert.same(3, reply.id)
    assert.matches("id 3 is already in flight", reply.error.message, 1, true)
    p:request(4, "release", {gate = "d"})
    local ids = {}
    for _ = 1, 2 do ids[#ids + 1] = p:next().id end
    table.sort(ids)
    assert.same({3, 4}, ids)
  end)

  it("answers an unknown method with unknown_method naming it", function()
    p:request(1, "teleport", {})
    local reply = p:next()
    assert.same("unknown_method", reply.error.code)
    assert.matches("`teleport`", reply.error.message, 1, true)
  end)
end)

describe("provider.server validation", function()
  local p
  before_each(function() p = start(); open_session(p) end)
  after_each(function() if p then stop(p) end end)

  local function error_for(method, params)
    p:request(1, method, params)
    local reply = p:next()
    assert.is_table(reply.error, "expected an error reply for " .. method)
    return reply.error
  end

  it("names `params` when a method that needs fields gets none", function()
    p:send('{"id":1,"method":"read_file"}')
    local e = p:next().error
    assert.same("invalid_request", e.code)
    assert.same("read_file: missing field `params` (an object)", e.message)
  end)

  it("writes only valid UTF-8: a result with other bytes is an internal error, a message is repaired", function()
    p:request(1, "raw_name", {})
    local reply, line = p:next()
    assert.same("internal", reply.error.code)
    assert.matches("method `raw_name` returned a string that is not valid UTF-8 (byte 0xff;", reply.error.message, 1, true)
    assert.is_not_nil(utf8.len(line))
    p:request(2, "raw_name", {fail = true})
    reply, line = p:next()
    assert.same({code = "not_found", message = "no file `a\u{FFFD}\u{FFFD}b`"}, reply.error)
    assert.is_not_nil(utf8.len(line))
  end)

  it("checks params against the protocol's shapes, naming the field", function()
    local e = error_for("exec", {session = SESSION})
    assert.same("invalid_request", e.code)
    assert.same("exec: missing field `params.argv`", e.message)
    e = error_for("exec", {session = SESSION, argv = {"ls", 3}})
    assert.same("exec: field `params.argv` must be a non-empty array of strings", e.message)
    e = error_for("write_file", {session = SESSION, path = 5, content_base64 = ""})
    assert.same("write_file: field `params.path` must be a string", e.message)
    e = error_for("read_file", "nope")
    assert.same("read_file: field `params` must be an object", e.message)
  end)

  it("hands methods the session object open returned when a request names it by id alone", function()
    p:request(1, "echo", {session = {id = "probe_1"}, x = 1})
    local reply = p:next()
    assert.same({session = SESSION, x = 1}, reply.result.params)
  end)

  it("refuses sessions it never opened", function()
    local e = error_for("read_file", {session = {id = "ghost"}, path = "a"})
    assert.same("unknown_session", e.code)
    assert.matches("`ghost`", e.message, 1, true)
  end)

  it("refuses invalid base64, naming the field and the offset", function()
    local e = error_for("write_file", {session = SESSION, path = "a", content_base64 = "AA*="})
    assert.same("invalid_request", e.code)
    assert.matches("params.content_base64", e.message, 1, true)
    assert.matches("offset", e.message, 1, true)
  end)

  it("decodes params and encodes results: binary bytes round-trip", function()
    p:request(1, "write_file", {session = SESSION, path = "dir/a.bin", content_base64 = "AAH/"})
    assert.same({}, p:next().result)
    p:request(2, "read_file", {session = SESSION, path = "dir/a.bin"})
    local reply = p:next()
    assert.same("AAH/", reply.result.content_base64)
    assert.is_nil(reply.result.content)
    assert.same("\0\1\255", core.b64decode(reply.result.content_base64))
  end)

  it("sends events in order before the result, with data as base64", function()
    p:request(5, "exec", {session = SESSION, argv = {"x"}, stdin_base64 = "aGk="})
    local started, out, exited, result = p:next(), p:next(), p:next(), p:next()
    assert.same({type = "started", process_id = "p1"}, started.event)
    assert.same({type = "stdout", data_base64 = "aGk="}, out.event)
    assert.same("exited", exited.event.type)
    assert.same({exit_code = 0, stdout_base64 = "aGk=", stderr_base64 = "/gA="}, result.result)
  end)

  it("turns handler failures into error replies", function()
    p:request(1, "read_file", {session = SESSION, path = "missing"})
    local e = p:next().error
    assert.same({code = "not_found", message = "no such file `missing`"}, e)
    e = error_for("boom", {})
    assert.same("internal", e.code)
    assert.matches("kaboom", e.message)
    e = error_for("number", {})
    assert.same("method `number` returned a number, expected a table", e.message)
  end)
end)

describe("provider.server concurrency and shutdown", function()
  it("runs each request in its own task: a blocked request does not delay others", function()
    local p = start()
    p:request(1, "block", {gate = "a"})
    p:request(2, "echo", {n = 2})
    assert.same(2, p:next().id)
    p:request(3, "release", {gate = "a"})
    local ids = {p:next().id, p:next().id}
    table.sort(ids)
    assert.same({1, 3}, ids)
    stop(p)
  end)

  it("shutdown answers what is in flight, closes sessions, replies {} and exits 0", function()
    local p = start()
    open_session(p)
    p:request(1, "block", {gate = "never"})
    p:request(2, "shutdown", {})
    local first, second = p:next(), p:next()
    assert.same(1, first.id)
    assert.same("internal", first.error.code)
    assert.matches("shutting down", first.error.message)
    assert.same({id = 2, result = {}}, second)
    assert.same(false, p:next_line())
    assert.same(0, (p:wait_exit()))
    assert.matches("probe: closed probe_1", p:stderr_text(), 1, true)
  end)

  it("end of input closes every session and exits 0", function()
    local p = start()
    open_session(p)
    p:close_stdin()
    assert.same(0, (p:wait_exit()))
    assert.matches("probe: closed probe_1", p:stderr_text(), 1, true)
  end)

  it("refuses an event sent after the reply (checked on stderr)", function()
    local p = start()
    p:request(1, "event_after_reply", {})
    assert.same({}, p:next().result)
    p:close_stdin()
    assert.same(0, (p:wait_exit()))
    assert.matches("event `late` after the reply to request 1", p:stderr_text(), 1, true)
  end)
end)

describe("smolwf provider serve", function()
  local function run_cli(...)
    local p = raw.start({core.exe_path(), "provider", ...})
    p:close_stdin()
    local code = p:wait_exit()
    return code, p:stderr_text()
  end

  it("names a missing file", function()
    local code, err = run_cli("serve", "spec/fixtures/does-not-exist.lua")
    assert.same(2, code)
    assert.matches("does%-not%-exist%.lua", err)
  end)

  it("refuses a file that does not return a table of methods", function()
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, "w"))
    f:write("return 42\n")
    f:close()
    local code, err = run_cli("serve", tmp)
    os.remove(tmp)
    assert.same(2, code)
    assert.matches("must return a table of methods, got number", err, 1, true)
  end)

  it("refuses an unknown subcommand with the usage", function()
    local code, err = run_cli("dance")
    assert.same(2, code)
    assert.same("smolwf provider: unknown subcommand 'dance' (see smolwf provider --help)\n"
      .. "usage: smolwf provider serve FILE.lua [ARGS...]", err)
  end)

  it("without a subcommand prints the usage naming serve FILE.lua, and exits 2", function()
    local code, err = run_cli()
    assert.same(2, code)
    assert.same("smolwf provider: missing subcommand (see smolwf provider --help)\n"
      .. "usage: smolwf provider serve FILE.lua [ARGS...]", err)
    code, err = run_cli("serve")
    assert.same(2, code)
    assert.same("smolwf provider: serve needs FILE.lua (see smolwf provider --help)\n"
      .. "usage: smolwf provider serve FILE.lua [ARGS...]", err)
    code, err = run_cli("--bogus")
    assert.same(2, code)
    assert.same("smolwf provider: unknown option '--bogus' (see smolwf provider --help)", err)
  end)

  it("--help prints the usage, options and exit status, and exits 0", function()
    for _, args in ipairs{{"--help"}, {"serve", "--help"}} do
      local p = raw.start({core.exe_path(), "provider", table.unpack(args)})
      p:close_stdin()
      local out = {}
      for line in function() return p:next_line() or nil end do out[#out + 1] = line end
      local text = table.concat(out, "\n")
      assert.same(0, (p:wait_exit()))
      assert.matches("^usage: smolwf provider serve FILE%.lua %[ARGS%.%.%.%]\n", text)
      assert.matches("\noptions:\n  %-%-help ", text)
      assert.matches("\nexit status: 0 served until shutdown or end of input", text)
    end
  end)
end)

describe("server.program", function()
  it("makes a PROGRAM that sandbox.open can start (`PROGRAM serve`)", function()
    local program = server.program(PROBE)
    local sb = sandbox.open{program = program, workspace = "/tmp"}
    finally(function() sb:close(); sandbox.shutdown(program) end)
    assert.same("probe_1", sb.id)
    sb:write_file("a.bin", "\0\1\255")
    assert.same("\0\1\255", sb:read_file("a.bin"))
    local r = sb:exec{"anything", stdin = "hello"}
    assert.same("hello", r.stdout)
    assert.same("\254\0", r.stderr)
    -- The probe does not announce session_by_id: requests carry the whole session object.
    assert.same(SESSION, cjson.decode(sb:exec{"raw-session"}.stdout))
  end)
end)

describe("the example provider scripts/lua_provider.lua", function()
  it("passes the provider conformance kit (part 1; it announces no extension)", function()
    local conformance = require "smol.provider.conformance"
    local program = server.program("scripts/lua_provider.lua")
    local failures = {}
    local report = conformance.run{program = program, profile = "local/default",
      on_result = function(r)
        if r.status == "fail" then failures[#failures + 1] = conformance.format(r) end
      end}
    assert.same({}, failures)
    assert.is_true(report.passed >= 60, "only " .. report.passed .. " checks passed")
  end)

  it("serves sessions through smol.sandbox", function()
    local core_ = require "smol.core"
    local ws = fs.temp_dir("smolwf-luaprov-spec")
    local f = assert(io.open(ws .. "/input.txt", "w"))
    f:write("from the host\n")
    f:close()
    local program = server.program("scripts/lua_provider.lua")
    local sb = sandbox.open{program = program, workspace = ws}
    finally(function()
      pcall(sb.close, sb)
      sandbox.shutdown(program)
      require("smol.testing").remove_tree(ws)
    end)
    assert.same("none", sb.capabilities.isolation)
    local r = sb:exec{"sh", "-c", "cat input.txt; pwd; echo oops >&2; exit 5", stdin = ""}
    assert.same(5, r.exit_code)
    assert.same("from the host\n" .. sb.cwd .. "\n", r.stdout)
    assert.same("oops\n", r.stderr)
    assert.same(127, sb:exec{"no-such-program-here"}.exit_code)
    sb:create_dir_all("a/b")
    sb:write_file("a/b/c.bin", "\0\1\255")
    assert.same("\0\1\255", sb:read_file("a/b/c.bin"))
    local ok, err = pcall(sb.read_file, sb, "../../etc/passwd")
    assert.is_false(ok)
    assert.same("permission_denied", err.code)
    local root = sb.cwd:match("^(.*)/workspace$")
    sb:close()
    assert.is_nil(require("lfs").attributes(root), "the session directory outlived close")
  end)
end)

describe("a Lua provider interrupted with Ctrl-C", function()
  it("still closes its sessions (the example's session directory is removed)", function()
    local lfs = require "lfs"
    local ws = fs.temp_dir("smolwf-int-spec")
    finally(function() require("smol.testing").remove_tree(ws) end)
    local p = start("scripts/lua_provider.lua")
    p:request(1, "open", {workspace_sync = {host_path = ws}})
    local session = p:next().result
    local root = session.cwd:match("^(.*)/workspace$")
    assert.truthy(lfs.attributes(root))
    p.proc:kill("INT")
    local code = p:wait_exit()
    assert.is_not.equal(0, code)
    assert.is_nil(lfs.attributes(root), "the session directory outlived the provider")
  end)
end)

describe("the README's hello provider", function()
  it("answers exec with events, fails read_file, and closes by default", function()
    local program = server.program("spec/fixtures/lua_provider_hello.lua")
    finally(function() sandbox.shutdown(program) end)
    local sb = sandbox.open{program = program}
    local chunks = {}
    local r = sb:exec{"anything", on_stdout = function(c) chunks[#chunks + 1] = c end}
    assert.same({0, "hi\n", {"hi\n"}}, {r.exit_code, r.stdout, chunks})
    local ok, err = pcall(sb.read_file, sb, "a")
    assert.is_false(ok)
    assert.same("failed to read sandbox file `a`: not_found: no such file `a`", tostring(err))
    assert.has_no.errors(function() sb:close() end)
  end)
end)
