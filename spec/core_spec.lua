-- smol.core: the C mechanism (loop, timers, processes, base64, fs helpers).
-- Runs inside the host: smolwf /usr/bin/busted --ignore-lua spec/core_spec.lua
local core = require "smol.core"
local fs = require "smol.fs"
local h = dofile("spec/fixtures/helpers.lua")

-- Runs the loop until cond() is true; fails instead of hanging (the
-- deadline is generous: only a real failure waits that long).
local function run_until(cond, seconds)
  assert(h.wait_until(cond, seconds), "timed out waiting")
end

-- Spawns and waits; returns {code, signal, stdout = {lines or chunks}, stderr = {...}}.
local function run(opts)
  local r = {stdout = {}, stderr = {}}
  opts.stdout = opts.stdout or "lines"
  opts.stderr = opts.stderr or "lines"
  opts.on_stdout = function(data, err)
    if data then r.stdout[#r.stdout + 1] = data else r.stdout_end, r.stdout_err = true, err end
  end
  opts.on_stderr = function(data, err)
    if data then r.stderr[#r.stderr + 1] = data else r.stderr_end = true end
  end
  opts.on_exit = function(code, sig) r.code, r.signal = code, sig end
  local p = assert(core.spawn(opts))
  r.proc = p
  if opts.before_wait then opts.before_wait(p, r) end
  run_until(function() return r.code ~= nil end)
  p:close()
  return r
end

local function sh(script, extra)
  local opts = extra or {}
  opts.file, opts.args = "/bin/sh", {"sh", "-c", script}
  return run(opts)
end

describe("smol.core", function()
  -- other specs in the same run may leave handles open (a shared provider):
  -- compare with what was open before each test
  local baseline
  before_each(function() baseline = core.open_handles() end)
  after_each(function()
    assert.is_true(h.handles_back_to(baseline), "uv handles left open: " .. core.open_handles() .. " > " .. baseline)
  end)

  describe("spawn", function()
    it("delivers stdout and stderr lines, then EOF, then the exit code", function()
      local r = sh("echo one; echo two; echo err >&2; printf 'no newline'; exit 3")
      assert.same({"one", "two", "no newline"}, r.stdout)
      assert.same({"err"}, r.stderr)
      assert.is_true(r.stdout_end and r.stderr_end)
      assert.equal(3, r.code)
      assert.is_nil(r.signal)
      assert.is_number(r.proc.pid)
    end)

    it("delivers binary-safe chunks", function()
      local all = {}
      for i = 0, 255 do all[#all + 1] = string.char(i) end
      local r = run{file = "/bin/cat", stdin = true, stdout = "chunks",
              before_wait = function(p) p:write(table.concat(all)); p:close_stdin() end}
      assert.equal(table.concat(all), table.concat(r.stdout))
    end)

    it("passes env (replacing ours) and cwd", function()
      local dir = fs.temp_dir("smolwf-core")
      local r = sh("echo \"$A-$HOME\"; pwd", {env = {A = "1"}, cwd = dir})
      assert.same({"1-", dir}, r.stdout)
      os.remove(dir)
    end)

    it("inherits our environment without env", function()
      local r = sh("echo \"$HOME\"")
      assert.same({os.getenv("HOME") or ""}, r.stdout)
    end)

    it("writes stdin in order and counts pending bytes", function()
      local r = run{file = "cat", args = {"cat"}, stdin = true, before_wait = function(p)
        p:write("a\n"); p:write("b\n")
        assert.is_true(p:pending_write_bytes() >= 0)
        p:close_stdin()
        p:close_stdin()  -- idempotent
        assert.has_error(function() p:write("late") end, "process write: stdin is closed")
      end}
      assert.same({"a", "b"}, r.stdout)
      -- run() closed it: a closed process raises, as a closed Lua file does
      assert.has_error(function() r.proc:pending_write_bytes() end, "attempt to use a closed process")
    end)

    it("answers kill of a process that exited (not closed) with false", function()
      local p = core.spawn{file = "true", args = {"true"}}
      run_until(function() return not p:kill(0) end)
      assert.is_false(p:kill())
      p:close()
    end)

    it("reports death by signal as 128+signo and the signal's name", function()
      -- sleep itself, not through sh: a shell killed after forking would leave
      -- its sleep holding stdout, and on_exit waits for EOF
      local r = run{file = "sleep", args = {"sleep", "5"}, before_wait = function(p) assert.is_true(p:kill()) end}
      assert.same({143, "TERM"}, {r.code, r.signal})
      r = run{file = "sleep", args = {"sleep", "5"}, before_wait = function(p) p:kill("KILL") end}
      assert.same({137, "KILL"}, {r.code, r.signal})
      r = sh("kill -USR1 $$")
      assert.same({138, "USR1"}, {r.code, r.signal})
      assert.has_error(function() r.proc:kill() end, "attempt to use a closed process")
    end)

    it("kills the whole process group with process_group", function()
      -- the background sleep holds stdout open: on_exit needs it dead too
      local t0 = core.now()
      local r = sh("sleep 30 & echo started; wait", {process_group = true, before_wait = function(p, r)
        run_until(function() return #r.stdout > 0 end)
        assert.is_true(p:kill("TERM"))
      end})
      assert.is_true(core.now() - t0 < 25)   -- well before the sleep's 30 s, even on a loaded machine
      assert.same({"started"}, r.stdout)
      assert.equal(143, r.code)
    end)

    it("returns nil, message, name when the program cannot start", function()
      local p, err, name = core.spawn{file = "/nonexistent/prog"}
      assert.is_nil(p)
      assert.equal("/nonexistent/prog: no such file or directory", err)
      assert.equal("ENOENT", name)
    end)

    it("raises on misuse, naming the option", function()
      assert.has_error(function() core.spawn{} end, "spawn: option 'file' must be a string (got nil)")
      assert.has_error(function() core.spawn{file = "x", args = "x"} end,
                       "spawn: option 'args' must be a table of strings")
      assert.has_error(function() core.spawn{file = "x", args = {"x", 1}} end,
                       "spawn: args[2] must be a string (got number)")
      assert.has_error(function() core.spawn{file = "x", stdout = "bogus"} end,
        'spawn: option \'stdout\' must be "lines", "chunks", "inherit" or "ignore" (got "bogus")')
      assert.has_error(function() core.spawn{file = "x", env = {A = 1}} end,
                       "spawn: env value for 'A' must be a string (got number)")
      assert.has_error(function() core.spawn{file = "x", on_stdout = print} end,
                       'spawn: option \'on_stdout\' needs stdout = "lines" or "chunks"')
      assert.has_error(function() core.spawn{file = "x", max_line = 0} end,
                       "spawn: option 'max_line' must be a positive integer")
    end)

    it("stops at an over-long line with an error, and still reports the exit", function()
      local r = sh("head -c 100 /dev/zero | tr '\\0' x; echo; echo after", {max_line = 10})
      assert.same({}, r.stdout)
      assert.equal("line longer than 10 bytes", r.stdout_err)
      assert.is_number(r.code)
    end)

    it("accepts lines up to the cap", function()
      local r = sh("printf '0123456789\\n'", {max_line = 10})
      assert.same({"0123456789"}, r.stdout)
    end)

    it("keeps reporting the exit of a dropped handle", function()
      local code
      core.spawn{file = "/bin/sh", args = {"sh", "-c", "exit 7"}, on_exit = function(c) code = c end}
      collectgarbage()
      run_until(function() return code ~= nil end)
      assert.equal(7, code)
    end)

    it("still delivers queued stdin writes after close()", function()
      local dir = fs.temp_dir("smolwf-core")
      local p = core.spawn{file = "/bin/sh", args = {"sh", "-c", "cat > out.txt; mv out.txt done.txt"},
                           cwd = dir, stdin = true}
      p:write(("x"):rep(100000))
      p:close()  -- no close_stdin: close() ends stdin after the queued bytes
      run_until(function()
        local f = io.open(dir .. "/done.txt")
        if f then f:close() end
        return f ~= nil
      end)
      local f = assert(io.open(dir .. "/done.txt"))
      assert.equal(100000, #f:read("a"))
      f:close()
      os.execute("rm -rf '" .. dir .. "'")
      run_until(function()  -- the shell's exit, which nobody listens to, closes the last handle
        core.run_nowait()
        return core.open_handles() <= baseline
      end)
    end)

    it("lets close() release a running process's callbacks", function()
      local called = false
      local p = core.spawn{file = "sleep", args = {"sleep", "0.1"}, on_exit = function() called = true end}
      p:close()
      p:close()  -- idempotent
      assert.has_error(function() p:kill() end, "attempt to use a closed process")
      assert.matches("closed", tostring(p))
      local t = core.timer(0.3, function() end)
      run_until(function() return not t:active() end)
      assert.is_false(called)
    end)
  end)

  describe("timer", function()
    it("fires once, in order of deadlines", function()
      local order = {}
      core.timer(0.02, function() order[#order + 1] = "b" end)
      core.timer(0, function() order[#order + 1] = "a" end)
      run_until(function() return #order == 2 end)
      assert.same({"a", "b"}, order)
    end)

    it("does not fire after stop(), which is idempotent", function()
      local fired = false
      local t = core.timer(0.01, function() fired = true end)
      t:stop()
      t:stop()
      assert.is_false(t:active())
      local later = core.timer(0.05, function() end)
      run_until(function() return not later:active() end)
      assert.is_false(fired)
    end)

    it("waits at least the time asked", function()
      local t0, fired = core.now(), nil
      core.timer(0.05, function() fired = core.now() end)
      run_until(function() return fired end)
      assert.is_true(fired - t0 >= 0.049)
    end)

    it("raises on a bad delay", function()
      assert.has_error(function() core.timer(-1, print) end)
      assert.has_error(function() core.timer(1) end)
    end)
  end)

  describe("loop", function()
    it("refuses to run nested", function()
      local err
      core.timer(0, function() err = select(2, pcall(core.run_once)) end)
      run_until(function() return err end)
      assert.matches("loop already running", err)
    end)

    it("reports when nothing is left", function()
      -- in a fresh host: this one's loop may hold other specs' providers
      local r = run{file = core.exe_path(), args = {"smolwf", "-e", [[
        local core = require "smol.core"
        print(core.run_nowait(), core.run_once(), core.open_handles())]]}}
      assert.same({"false\tfalse\t0"}, r.stdout)
    end)

    it("tells monotonic and wall time", function()
      local a = core.now()
      assert.is_true(core.now() >= a)
      assert.is_true(math.abs(core.time() - os.time()) < 2)
    end)
  end)

  describe("the host's own stdin and stdout", function()
    -- a child smolwf echoes its stdin through read_stdin/write_stdout
    local ECHO = [[
      local core = require "smol.core"
      local max = tonumber(os.getenv("MAX_LINE"))
      local r = core.read_stdin{mode = os.getenv("MODE"), max_line = max, on_data = function(d, err)
        if d then core.write_stdout("<" .. d .. ">")
        else core.write_stdout(err and ("error:" .. err) or "EOF") end
      end}
      local second, why = core.read_stdin{on_data = print}
      core.write_stdout(tostring(second) .. "," .. why .. ";")
      while core.run_once() do end
      assert(core.stdout_pending() == 0)]]

    local function echo(mode, input, max_line)
      local env = {MODE = mode, MAX_LINE = max_line and tostring(max_line) or "", PATH = os.getenv("PATH")}
      local r = run{file = core.exe_path(), args = {"smolwf", "-e", ECHO}, env = env,
                    stdin = true, stdout = "chunks", before_wait = function(p)
                      p:write(input)
                      p:close_stdin()
                    end}
      assert.equal(0, r.code, table.concat(r.stderr, "\n"))
      return table.concat(r.stdout)
    end

    it("reads lines, the last one without a newline too, then EOF", function()
      assert.equal("nil,busy;<a><bb><ccc>EOF", echo("lines", "a\nbb\nccc"))
    end)

    it("reads chunks", function()
      local out = echo("chunks", "a\nbb\0\255")
      assert.equal("a\nbb\0\255", out:match("^nil,busy;(.*)EOF$"):gsub("[<>]", ""))
    end)

    it("reads lines that end in a later read, and many in one read, intact", function()
      local lines = {}
      for i = 1, 60 do lines[i] = string.rep(string.char(65 + i % 26), (i * 37771) % 300000) end
      local input = table.concat(lines, "\n") .. "\n"
      local out = echo("lines", input)
      assert.equal("nil,busy;<" .. table.concat(lines, "><") .. ">EOF", out)
    end)

    it("stops at an over-long line", function()
      assert.equal("nil,busy;<a>error:line longer than 2 bytes", echo("lines", "a\nbbb\nc\n", 2))
    end)
  end)

  describe("terminal questions", function()
    local function probe(wrap)
      local code = "local c = require 'smol.core' print(c.isatty(1), c.term_width(), c.isatty(0))"
      local p = io.popen(wrap(string.format("%q -e %q", core.exe_path(), code)))
      local out = p:read("a"):gsub("\r", "")
      p:close()
      return out
    end

    it("answers no through a pipe", function()
      assert.equal("false\tnil\tfalse\n", probe(function(cmd) return cmd .. " </dev/null" end))
    end)

    it("answers yes with the width in a terminal", function()
      if not os.execute("command -v script >/dev/null") then pending("util-linux `script` not installed"); return end
      local out = probe(function(cmd) return string.format("script -qec %q /dev/null", "stty cols 71; " .. cmd) end)
      assert.matches("true\t71\ttrue\n$", out)
    end)

    it("rejects a bad fd", function()
      assert.has_error(function() core.isatty(-1) end)
      assert.has_error(function() core.isatty("x") end)
    end)
  end)

  describe("capture", function()
    it("keeps the first `limit` bytes across appends, and says when more came", function()
      local c = core.capture(10)
      c:append("0123")
      c:append("")
      c:append("45678")
      assert.same({"012345678", nil}, {c:take()})
      assert.same({"", nil}, {c:take()})   -- take empties it
      c:append("0123456789")
      assert.same({"0123456789", nil}, {c:take()})   -- exactly the limit is not truncated
      c:append("01234")
      c:append("56789abc")
      c:append("more")
      assert.same({"0123456789", true}, {c:take()})
    end)

    it("keeps binary bytes and grows past its first buffer up to the limit", function()
      local chunk = string.rep("\0\1\255", 40000)   -- 120 000 bytes, beyond the first 64 KiB
      local c = core.capture(1000000)
      for _ = 1, 9 do c:append(chunk) end
      local s, truncated = c:take()
      assert.equal(string.rep(chunk, 8) .. chunk:sub(1, 40000), s)
      assert.is_true(truncated)
    end)

    it("with a limit of 0 keeps nothing, and rejects a bad limit or append", function()
      local c = core.capture(0)
      c:append("x")
      assert.same({"", true}, {c:take()})
      local unlimited = core.capture(math.huge)
      unlimited:append("all of it")
      assert.same({"all of it", nil}, {unlimited:take()})
      assert.has_error(function() core.capture(-1) end)
      assert.has_error(function() core.capture(1.5) end)
      assert.has_error(function() core.capture("x") end)
      assert.has_error(function() core.capture(4):append({}) end)
    end)
  end)

  describe("base64", function()
    it("round-trips every byte value", function()
      local all = {}
      for i = 0, 255 do all[#all + 1] = string.char(i) end
      local s = table.concat(all)
      assert.equal(s, core.b64decode(core.b64encode(s)))
      assert.equal("AAH/", core.b64encode("\0\1\255"))
      assert.equal("\254\0", core.b64decode("/gA="))
      assert.equal("", core.b64decode(""))
    end)

    it("matches RFC 4648's test vectors and round-trips every length", function()
      local vectors = {[""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==",
                       fooba = "Zm9vYmE=", foobar = "Zm9vYmFy"}
      for plain, encoded in pairs(vectors) do
        assert.equal(encoded, core.b64encode(plain))
        assert.equal(plain, core.b64decode(encoded))
      end
      local bytes = {}
      for n = 1, 300 do
        bytes[n] = string.char((n * 97 + 13) % 256)
        local s = table.concat(bytes)
        assert.equal(s, core.b64decode(core.b64encode(s)), "length " .. n)
      end
    end)

    it("decodes a range of a string, with string.sub's positions", function()
      local s = '{"data_base64":"Zm9vYmFy","x":1}'
      assert.equal("foobar", core.b64decode(s, 17, 24))
      assert.equal("foo", core.b64decode(s, 17, 20))
      assert.equal("foobar", core.b64decode("xxZm9vYmFy", 3))
      assert.equal("foobar", core.b64decode("Zm9vYmFy", -8, -1))
      assert.equal("", core.b64decode(s, 5, 4))
      assert.equal("", core.b64decode("", 1, 10))
      assert.same({nil, "invalid base64 at offset 3"}, {core.b64decode("xxZm9!YmFy", 3, 10)})
      assert.is_nil(core.b64decode(s, 16, 24))   -- the quote is not base64
      assert.has_error(function() core.b64decode(s, "x") end)
    end)

    it("decodes big payloads (beyond the reused buffer) and small ones after them", function()
      local big = string.rep("\1\2\255", 3 * 1024 * 1024)
      assert.equal(big, core.b64decode(core.b64encode(big)))
      assert.equal("foo", core.b64decode("Zm9v"))
    end)

    -- The codec has vector paths for long inputs (AVX2, chosen at run
    -- time) and a scalar tail: both against a plain reference encoder.
    local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    local function reference_encode(s)
      local out = {}
      for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local v = a << 16 | (b or 0) << 8 | (c or 0)
        for k = 0, 3 do
          local idx = (v >> (18 - 6 * k)) & 63
          out[#out + 1] = (k <= 1 or (k == 2 and b) or (k == 3 and c)) and ALPHABET:sub(idx + 1, idx + 1) or "="
        end
      end
      return table.concat(out)
    end

    it("encodes and decodes as a plain reference codec does, at every length", function()
      local seed = 12345
      local function byte()
        seed = (seed * 1103515245 + 12345) % 2147483648
        return seed >> 16 & 255
      end
      for n = 0, 400 do
        local bytes = {}
        for i = 1, n do bytes[i] = string.char(byte()) end
        local plain = table.concat(bytes)
        local encoded = reference_encode(plain)
        assert.equal(encoded, core.b64encode(plain), "encoding, length " .. n)
        assert.equal(plain, core.b64decode(encoded), "decoding, length " .. n)
      end
    end)

    it("finds an invalid character wherever it is in a long input", function()
      local encoded = core.b64encode(string.rep("smol-workflow ", 30))
      for _, bad in ipairs{"!", "=", "\0", "\255", " "} do
        for at = 1, #encoded - 4 do
          local corrupt = encoded:sub(1, at - 1) .. bad .. encoded:sub(at + 1)
          assert.same({nil, "invalid base64 at offset " .. (at - 1)}, {core.b64decode(corrupt)},
            ("%q at %d"):format(bad, at))
        end
      end
    end)

    it("rejects invalid input with the offset", function()
      assert.same({nil, "invalid base64 at offset 2"}, {core.b64decode("Zm=v")})
      assert.is_nil(core.b64decode("Zg"))
      assert.is_nil(core.b64decode("Zg==Zg=="))
      assert.is_nil(core.b64decode("===="))
      assert.is_nil(core.b64decode(" Zg=="))
      assert.is_nil(core.b64decode("Zg=\n"))
      assert.same({nil, "invalid base64 at offset 5"}, {core.b64decode("Zm9vY!Fy")})
      assert.same({nil, "invalid base64 at offset 6"}, {core.b64decode("Zm9vYm=y")})
    end)
  end)

  describe("fs helpers", function()
    it("makes a temp dir from a template", function()
      local dir = assert(core.mkdtemp("/tmp/smolwf-core-XXXXXX"))
      assert.matches("^/tmp/smolwf%-core%-", dir)
      assert.is_true(os.remove(dir))
      assert.has_error(function() core.mkdtemp("/tmp/nox") end)
      local none, err, code = core.mkdtemp("/nonexistent/dir/XXXXXX")
      assert.is_nil(none)
      assert.matches("No such file", err)
      assert.equal("ENOENT", code)
    end)

    it("knows where the host lives", function()
      assert.matches("^/.*/smolwf$", core.exe_path())
      local bundled = core.bundled_provider()
      assert.is_true(bundled == nil or bundled:match("/smolwf%-provider$") ~= nil)
      assert.is_string(core.version)
    end)
  end)

  describe("sha256 (libcrypto opened at the first digest)", function()
    local ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    local EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    it("digests strings in order, files, and files on the thread pool", function()
      assert.equal(ABC, core.sha256("abc"))
      assert.equal(ABC, core.sha256("a", "", "bc"))
      assert.equal(EMPTY, core.sha256())
      assert.equal(core.sha256("12"), core.sha256(1, 2))
      assert.matches("bad argument #2 to '[%w.]*sha256' %(string expected, got table%)", h.catch(core.sha256, "a", {}))
      local dir = h.tempdir()
      local path = dir .. "/abc"
      assert(io.open(path, "w")):write("abc"):close()
      assert.equal(ABC, core.sha256_file(path))
      assert.same({nil, dir .. "/none: No such file or directory"}, {core.sha256_file(dir .. "/none")})
      local digests
      core.hash_files({path, dir .. "/none"}, function(d) digests = d end)
      run_until(function() return digests ~= nil end)
      assert.same({ABC, false, errors = {[2] = dir .. "/none: No such file or directory"}}, digests)
      h.remove_dir(dir)
    end)

    it("starts without libcrypto, and a digest then names the library it could not load", function()
      local dir = h.tempdir()
      assert(io.open(dir .. "/libcrypto.so.3", "w")):write("not a library"):close()
      local env = {LD_LIBRARY_PATH = dir}
      local out, status = h.run_host([[print("started")]], env)
      assert.equal("started\n", out)
      assert.equal(0, status)
      out = h.run_host([[print(pcall(require("smol.core").sha256, "abc"))]], env)
      assert.matches("^false\tsha256: cannot load libcrypto%.so%.3: .*" .. dir:gsub("%p", "%%%0") .. "/libcrypto%.so%.3", out)
      out = h.run_host([[print(pcall(require("smol.core").hash_files, {"/etc/hostname"}, print))]], env)
      assert.matches("^false\thash_files: cannot load libcrypto", out)
      h.remove_dir(dir)
    end)
  end)
end)

describe("core.json_decode", function()
  it("gives the value of a line json_problem finds nothing in, with integral numbers as integers", function()
    local v = core.json_decode('{"id":7,"result":{"a":[1,2.5,null,true],"s":"x"}}')
    assert.same(7, v.id)
    assert.equals("integer", math.type(v.id))
    assert.equals(2.5, v.result.a[2])
    assert.equals(require("cjson").null, v.result.a[3])
    assert.same({"x", true}, {v.result.s, v.result.a[4]})
  end)

  it("gives nil and json_problem's message, kind and key otherwise", function()
    local cases = {
      {'{"id":1,"id":2}', "duplicate", "id"},
      {'{"id":1} x', "trailing", 8},
      {'{"id":1.5}', "id"},
      {'{"id":1,"s":"a\\u0000b"}', "nul"},
      {'{"id":', "json"},
      {'{"id":"\xff"}', "utf8"},
    }
    for _, c in ipairs(cases) do
      local v, message, kind, key = core.json_decode(c[1])
      assert.is_nil(v, c[1])
      assert.equals(c[2], kind, c[1])
      assert.equals(c[3], key, c[1])
      assert.same({message, kind, key}, {core.json_problem(c[1])})
    end
  end)

  it("refuses a line nested deeper than it was asked to go", function()
    local line = ("["):rep(10) .. ("]"):rep(10)
    assert.is_table(core.json_decode(line, 10))
    local v, message, kind = core.json_decode(line, 9)
    assert.is_nil(v)
    assert.equals("depth", kind)
    assert.matches("deeper than 9 levels", message, 1, true)
  end)
end)
