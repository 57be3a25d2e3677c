-- Output frames (docs/protocol.md, "Output frames"): an output event's line
-- with data_bytes, then its bytes raw. Read by the host's connection
-- (host/smolwf/conn.c, reader.c) from the bundled provider and from a fake
-- one that sends what a real provider would not: frames cut across reads,
-- broken frame lines, an end of output inside a frame.
local cjson = require "cjson"
local sandbox = require "smol.sandbox"
local errors = require "smol.errors"
local fs = require "smol.fs"
local h = dofile("spec/fixtures/helpers.lua")

local FAULT = h.fixture("fault_provider.lua")
local FRAME_BYTES = "line one\n{\"id\":1,\"result\":{}}\n\"data_bytes\":7\0\255 end"

local function requests(dir)
  local out = {}
  for line in io.lines(dir .. "/requests.jsonl") do out[#out + 1] = cjson.decode(line) end
  return out
end

local function exec_params(dir)
  for _, r in ipairs(requests(dir)) do
    if r.method == "exec" then return r.params end
  end
end

describe("output frames from a fake provider", function()
  local sb, ws
  before_each(function()
    ws = h.tempdir()
    sb = sandbox.open{program = FAULT, profile = "fault/frames", workspace = ws}
  end)
  after_each(function()
    pcall(sb.close, sb)
    sandbox.shutdown()
    h.cleanup()
  end)

  it("are asked for where the session announces raw_output, and only there", function()
    sb:exec{"x"}
    assert.is_true(exec_params(ws).raw_output)
    local plain_ws = h.tempdir()
    local plain = sandbox.open{program = FAULT, workspace = plain_ws}
    plain:exec{"x"}
    assert.is_nil(exec_params(plain_ws).raw_output)
  end)

  it("give exactly their bytes, among base64 events and empty frames", function()
    local out, err = {}, {}
    local r = sb:exec{"frames", on_stdout = function(c) out[#out + 1] = c end,
      on_stderr = function(c) err[#err + 1] = c end}
    assert.same({FRAME_BYTES, "", "+base64"}, out)
    assert.same({"err\n\0"}, err)
    assert.equal(FRAME_BYTES .. "+base64", r.stdout)
    assert.equal("err\n\0", r.stderr)
    assert.equal(0, r.exit_code)
  end)

  it("come to on_event as base64 events do", function()
    local seen = {}
    sb:exec{"frames", on_event = function(ev)
      if ev.type == "stdout" then seen[#seen + 1] = {ev.data, ev.data_base64, ev.data_bytes} end
    end}
    assert.equal(3, #seen)
    assert.same({FRAME_BYTES, require("smol.core").b64encode(FRAME_BYTES)}, seen[1])
  end)

  it("are put together when their line and bytes come in parts", function()
    local chunks = {}
    local r = sb:exec{"frame_split", on_stdout = function(c) chunks[#chunks + 1] = c end}
    assert.same({string.rep("0123456789", 30000)}, chunks)
    assert.equal(300000, #r.stdout)
  end)

  local function broken(kind, pattern)
    local e = h.catch(sb.exec, sb, {"frame_bad", kind})
    assert.is_true(errors.is(e, "protocol"), tostring(e))
    assert.matches("sent an output frame with " .. pattern, e.message)
    assert.is_false(sb:connection():alive())
    sandbox.shutdown()
    sb = sandbox.open{program = FAULT, profile = "fault/frames", workspace = ws}
  end

  it("break the connection when their line breaks a rule, saying which", function()
    local count = "a data_bytes that is no byte count within the line limit"
    broken("negative", count)
    broken("fraction", count)
    broken("string", count)
    broken("too_big", count)
    broken("not_output", "an event that is not stdout or stderr")
    broken("both", "an event with both data_bytes and data_base64")
    broken("nul", "a frame's line holding \\u0000")
    assert.equal("x", sb:exec{"x"}.stdout)   -- a new connection works
  end)

  it("cut by the provider's exit fail the request, saying how much came", function()
    local e = h.catch(sb.exec, sb, {"frame_cut"})
    assert.matches("after it sent an output frame cut short %(10 of its 100 bytes came%)", tostring(e))
  end)
end)

describe("output frames from the bundled provider", function()
  local dir
  before_each(function() dir = fs.temp_dir("smolwf-frames-spec") end)
  after_each(function()
    sandbox.shutdown()
    require("smol.testing").remove_tree(dir)
  end)

  for _, profile in ipairs{"local/default", "bwrap/default"} do
    it("carry any bytes exactly, streamed and captured (" .. profile .. ")", function()
      local block = {}
      for i = 0, 255 do block[#block + 1] = string.char(i) end
      local data = (table.concat(block) .. "\n"):rep(12 * 1024)   -- every byte value, 3 MiB, at every alignment
      fs.write_file(dir .. "/data.bin", data)   -- before open: the session's workspace is made from it
      local sb = sandbox.open{profile = profile, workspace = dir}
      assert.is_true(sb.capabilities.raw_output)
      local streamed = {}
      local r = sb:exec{"sh", "-c", "cat data.bin; cat data.bin >&2",
        on_stdout = function(c) streamed[#streamed + 1] = c end}
      assert.is_true(table.concat(streamed) == data)
      assert.is_true(r.stdout == data)
      assert.is_true(r.stderr == data)
      local quiet = sb:exec{"cat", "data.bin"}
      assert.is_true(quiet.stdout == data)
      sb:close()
    end)
  end
end)

-- Output that only streams (capture = false) leaves the bundled provider by
-- splice(2), from the command's pipe to the host's, unless the host's pipe
-- is full or lines are queued before it: then its bytes are copied.
describe("streamed frames from the bundled provider", function()
  local core = require "smol.core"
  local dir, sb, data
  before_each(function()
    dir = fs.temp_dir("smolwf-frames-spec")
    local block = {}
    for i = 0, 255 do block[#block + 1] = string.char(i) end
    data = (table.concat(block) .. "\n"):rep(12 * 1024)   -- 3 MiB: past the size where a stream rests
    fs.write_file(dir .. "/data.bin", data)
  end)
  after_each(function()
    if sb then sb:close() end
    sandbox.shutdown()
    require("smol.testing").remove_tree(dir)
  end)

  local function stream(argv, on_chunk)
    local out, err = {}, {}
    argv.capture = false
    argv.on_stdout = function(c) if on_chunk then on_chunk(c) end out[#out + 1] = c end
    argv.on_stderr = function(c) err[#err + 1] = c end
    local r = sb:exec(argv)
    return table.concat(out), table.concat(err), r
  end

  for _, profile in ipairs{"local/default", "bwrap/default"} do
    it("carry stdout and stderr exactly (" .. profile .. ")", function()
      sb = sandbox.open{profile = profile, workspace = dir}
      local out, err, r = stream{"sh", "-c", "cat data.bin; cat data.bin >&2; cat data.bin"}
      assert.is_true(out == data .. data)
      assert.is_true(err == data)
      assert.equal(0, r.exit_code)
      assert.is_nil(r.stdout)
    end)
  end

  it("stay exact when the host stops reading for a while", function()
    sb = sandbox.open{profile = "local/default", workspace = dir}
    local stalled = 0
    local out = stream({"sh", "-c", "cat data.bin data.bin data.bin"}, function()
      if stalled >= 3 then return end
      stalled = stalled + 1
      local until_t = core.now() + 0.2   -- the loop is held: the host's pipe fills behind the provider
      repeat until core.now() >= until_t
    end)
    assert.equal(3, stalled)
    assert.is_true(out == data .. data .. data)
  end)

  it("bring what a stream writes after it rested", function()
    sb = sandbox.open{profile = "local/default", workspace = dir}
    local out = stream{"sh", "-c", "cat data.bin; sleep 0.2; echo end; sleep 0.1; printf more"}
    assert.is_true(out == data .. "end\nmore")
  end)
end)

-- The bundled provider's own bytes on the wire, read without a client.
describe("the bundled provider's frames", function()
  local core = require "smol.core"
  local PROVIDER = core.bundled_provider()

  local function exchange(exec_params)
    local got, exited = {}, false
    local proc = assert(core.spawn{file = PROVIDER, args = {PROVIDER, "serve"}, stdin = true, stdout = "chunks",
      on_stdout = function(c) if c then got[#got + 1] = c end end, on_exit = function() exited = true end})
    local function text() return table.concat(got) end
    proc:write(cjson.encode({id = 1, method = "open", params = {metadata = {request_id = "f", sandbox_group_id = "f"},
      profile = {provider = "local", name = "default"}, workspace_sync = {host_path = cjson.null}, cwd = cjson.null}}) .. "\n")
    assert.truthy(h.wait_until(function() return text():find("\n") ~= nil end))
    local sid = text():match('"id":"([^"]+)"')
    got = {}
    exec_params.session = {id = sid}
    proc:write(cjson.encode({id = 2, method = "exec", params = exec_params}) .. "\n")
    assert.truthy(h.wait_until(function() return text():find('"id":2,"result"', 1, true) or text():find('"id":2,"error"', 1, true) end))
    proc:close_stdin()
    assert.is_true(h.wait_until(function() return exited end))
    proc:close()
    return text()
  end

  it("are the event's line, then the bytes, for the request that asked", function()
    local out = exchange{argv = {"printf", "a\\nb"}, raw_output = true, max_output_bytes = 0}
    assert.matches('\n{"id":2,"event":{"type":"stdout","data_bytes":3}}\na\nb{"id":2,"event":{"type":"exited"', out, 1, true)
  end)

  it("are base64 lines for a request that did not ask", function()
    local out = exchange{argv = {"printf", "a\\nb"}, max_output_bytes = 0}
    assert.is_truthy(out:find('{"id":2,"event":{"type":"stdout","data_base64":"YQpi"}}\n', 1, true))
    assert.is_nil(out:find("data_bytes", 1, true))
  end)

  it("are refused with a raw_output that is no boolean, naming the field", function()
    local out = exchange{argv = {"true"}, raw_output = 1}
    assert.is_truthy(out:find('"code":"invalid_request","message":"field `raw_output` must be a boolean"', 1, true), out)
  end)
end)

-- smol.core's side of frames for a Lua client (the conformance kit's wire).
describe("proc:expect_frame", function()
  local core = require "smol.core"

  local function run(script, on_line)
    local got, done, proc = {}, false, nil
    proc = assert(core.spawn{file = "sh", args = {"sh", "-c", script}, stdout = "lines",
      on_stdout = function(data, err, frame)
        if data then got[#got + 1] = frame and {frame = data} or data end
        if data and not frame and on_line then on_line(proc, data) end
        if not data then done = err or true end
      end})
    assert.truthy(h.wait_until(function() return done end))
    proc:close()
    return got, done
  end

  it("hands the next bytes to on_stdout whole, newlines and all, then lines again", function()
    local got = run([[printf 'head\nab\ncd\nefgh\ntail\n']], function(p, line)
      if line == "head" then p:expect_frame(6) end
    end)
    assert.same({"head", {frame = "ab\ncd\n"}, "efgh", "tail"}, got)
  end)

  it("says when the output ends inside the frame", function()
    local _, done = run([[printf 'head\nabc']], function(p, line)
      if line == "head" then p:expect_frame(10) end
    end)
    assert.equal("an output frame cut short (3 of its 10 bytes came)", done)
  end)

  it("refuses a size below 1 at the caller's line, and a stream read in chunks", function()
    run([[printf 'head\n']], function(p)
      local ok, e = pcall(function() p:expect_frame(0) end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'expect_frame' %(a frame's size must be at least 1 byte%)", e)
    end)
    local proc = assert(core.spawn{file = "true", args = {"true"}, stdout = "chunks", on_stdout = function() end})
    assert.matches("stdout is not read in lines mode", select(2, pcall(function() proc:expect_frame(5) end)))
    proc:close()
  end)
end)
