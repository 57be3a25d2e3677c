-- The bundled provider against hostile commands and hostile lines
-- (host/provider/file_open.c, tree.c, envelope.c, names.c, reply.c,
-- fd_reserve.c, bwrap_args.c): special files never block the loop, trees
-- of any depth are removed, every line written is valid UTF-8 JSON, bad
-- lines either mean exactly what they say or are refused by their id,
-- running out of descriptors leaves nothing behind, /etc is masked by
-- rule, and stdin queues are bounded. Each runs on both profiles where
-- the difference matters. Real provider, real commands.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local core = require "smol.core"

local PROFILES = {"local/default", "bwrap/default"}

local function profile_of(name)
  local provider, pname = name:match("^(.-)/(.*)$")
  return {profile = {provider = provider, name = pname}}
end

-- A connection whose every stdout line is also kept raw in conn.raw_lines.
local function start_recording(opts)
  local conn = ph.start(opts)
  conn.raw_lines = {}
  local on_line = conn.on_line
  conn.on_line = function(self, line)
    self.raw_lines[#self.raw_lines + 1] = line
    return on_line(self, line)
  end
  return conn
end

-- The request was answered with an error of `code` whose message matches pattern.
local function assert_refused(req, code, pattern, what)
  assert.equals(code, req.error and req.error.code, what)
  assert.matches(pattern, req.error.message, 1, false, what)
end

local function assert_lines_utf8(conn)
  for _, line in ipairs(conn.raw_lines) do
    assert.is_truthy(utf8.len(line), "a reply line is not valid UTF-8: " .. line:sub(1, 120))
  end
end

local function sh(conn, s, script)
  local req = ph.exec(conn, s, {"sh", "-c", script})
  assert.equals(0, req.result and req.result.exit_code, script)
  return ph.unb64(req.result.stdout_base64)
end

-- Spawns argv and waits until it has printed `ready` (the process keeps running).
local function spawn_ready(conn, s, argv)
  local sp = ph.op(conn, s, "spawn", {argv = argv})
  local id = assert(sp.result, "spawn failed").process_id
  local seen = ""
  assert.is_true(ph.wait_until(function()
    local w = ph.op(conn, s, "wait", {process_id = id, timeout_ms = 100})
    seen = seen .. ph.unb64(w.result and w.result.stdout_base64)
    return seen:find("ready", 1, true) ~= nil
  end, 10), "never ready: " .. seen)
  return id
end

for _, profile in ipairs(PROFILES) do
  describe("provider hardening, " .. profile .. ":", function()
    after_each(function()
      ph.stop_all()
    end)

    it("read_file and write_file of a FIFO are refused at once, with or without a process at its other end", function()
      local conn = ph.start()
      local s = ph.open(conn, profile_of(profile))
      sh(conn, s, "mkfifo lonely held")
      spawn_ready(conn, s, {"sh", "-c", "exec 3<>held; echo ready; exec sleep 60"})
      for _, path in ipairs({"lonely", "held"}) do
        local r = ph.op(conn, s, "read_file", {path = path}, {timeout = 5})
        assert_refused(r, "invalid_request", "FIFO", path)
        local w = ph.op(conn, s, "write_file", {path = path, content_base64 = ph.b64("x")}, {timeout = 5})
        assert_refused(w, "invalid_request", "FIFO", path)
      end
      assert.is_table(conn:call("describe", {}, {timeout = 5}).result)
    end)

    it("a file another process holds a lease on is io_error at once, not a 45 s wait", function()
      local conn = ph.start()
      local s = ph.open(conn, profile_of(profile))
      assert.is_table(ph.op(conn, s, "write_file", {path = "leased", content_base64 = ph.b64("data")}).result)
      -- a write lease stops every open, a read lease every open for writing
      for _, case in ipairs({{"F_WRLCK", "read_file"}, {"F_RDLCK", "write_file"}}) do
        spawn_ready(conn, s, {"python3", "-c", table.concat({
          "import fcntl, os, time",
          "fd = os.open('leased', os.O_RDONLY)",
          "fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl." .. case[1] .. ")",
          "print('ready', flush=True)", "time.sleep(60)"}, "\n")})
        local t0 = core.now()
        local r = ph.op(conn, s, case[2], {path = "leased", content_base64 = ph.b64("x")}, {timeout = 5})
        assert.is_true(core.now() - t0 < 5, case[2] .. " waited for the lease")
        assert_refused(r, "io_error", "lease", case[2])
      end
      assert.equals("data", ph.unb64(ph.op(conn, s, "read_file", {path = "leased"}).result.content_base64))
    end)

    it("remove, close and shutdown take directory chains 5000 levels deep", function()
      local root = ph.tempdir()
      local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = root}})
      local s, s2 = ph.open(conn, profile_of(profile)), ph.open(conn, profile_of(profile))
      -- a chain 5000 levels deep, a file at its end and a directory nobody may enter
      local deep = table.concat({
        "import os, sys", "os.chdir(os.environ['TMPDIR'] if sys.argv[1] == 'TMP' else '.')",
        "for _ in range(5000):", "    os.mkdir('d')", "    os.chdir('d')",
        "open('f', 'w').write('x')", "os.mkdir('ro')", "os.chmod('ro', 0)"}, "\n")
      for _, made in ipairs({{s, "."}, {s, "TMP"}, {s2, "."}}) do
        local r = ph.exec(conn, made[1], {"python3", "-c", deep, made[2]}, {}, {timeout = 60})
        assert.equals(0, r.result and r.result.exit_code, ph.unb64(r.result and r.result.stderr_base64))
      end
      assert.same({}, ph.op(conn, s, "remove", {path = "d"}, {timeout = 60}).result)
      assert.equals("not_found", ph.op(conn, s, "stat", {path = "d"}).error.code)
      assert.same({}, conn:call("close", s, {timeout = 60}).result)   -- the chain in its tmp
      local provider_root = assert(ph.list(root)[1])
      assert.same({"s2"}, ph.list(root .. "/" .. provider_root))
      assert.same({}, conn:call("shutdown", {}, {timeout = 60}).result)
      assert.is_true(conn:wait_exit(10))
      assert.same({}, ph.list(root))
    end)

    it("lists a name that is not UTF-8 in valid JSON, with name_base64, and reaches it by path_base64", function()
      local conn = start_recording()
      local s = ph.open(conn, profile_of(profile))
      sh(conn, s, [[printf hi > "$(printf 'a\377\376')"; mkdir "$(printf 'dir\377')"; : > plain]])
      local entries = ph.op(conn, s, "list_dir", {path = "."}).result.entries
      assert_lines_utf8(conn)
      assert.equals(3, #entries)
      local odd = entries[1]
      assert.equals("a\u{FFFD}\u{FFFD}", odd.name)
      assert.equals("a\255\254", ph.unb64(odd.name_base64))
      assert.equals("dir\255", ph.unb64(entries[2].name_base64))
      assert.same({name = "plain", type = "file", size = 0}, entries[3])
      local path_b64 = ph.b64("a\255\254")
      assert.equals("hi", ph.unb64(ph.op(conn, s, "read_file", {path_base64 = path_b64}).result.content_base64))
      assert.equals("file", ph.op(conn, s, "stat", {path_base64 = path_b64}).result.type)
      local missing = ph.op(conn, s, "read_file", {path_base64 = ph.b64("nope\255")})
      assert.equals("not_found", missing.error.code)
      assert.equals("invalid_request", ph.op(conn, s, "stat", {path_base64 = ph.b64("a\0b")}).error.code)
      assert.same({}, ph.op(conn, s, "remove", {path_base64 = path_b64}).result)
      assert.equals(2, #ph.op(conn, s, "list_dir", {path = "."}).result.entries)
      assert_lines_utf8(conn)
    end)

    -- A provider limited to `limit` descriptors, its root in a directory of its own.
    local function start_limited(limit)
      local root = ph.tempdir()
      return ph.start({prefix = {"prlimit", "--nofile=" .. limit .. ":" .. limit, "--"},
                       env_extra = {XDG_RUNTIME_DIR = root}}), root
    end

    -- Calls attempt() until a request fails (at most 40 times): the sessions made, and the failed request.
    local function until_one_fails(attempt)
      local made = {}
      while #made < 40 do
        local req = attempt()
        if not req.result then return made, req end
        made[#made + 1] = req.result
      end
      return made, nil
    end

    -- The failure is limit_exceeded, its session left no directory, and closing every session left none.
    local function assert_failed_cleanly(conn, root, sessions, failed, what)
      assert.is_table(failed and failed.error, "no " .. what .. " failed")
      assert.equals("limit_exceeded", failed.error.code, failed.error.message)
      local provider_root = root .. "/" .. ph.list(root)[1]
      assert.equals(#sessions, #ph.list(provider_root), what .. ": a failed session left its directory")
      for _, s in ipairs(sessions) do assert.same({}, conn:call("close", s).result) end
      assert.same({}, ph.list(provider_root), what .. ": a closed session left its directory")
      for _, line in ipairs(conn.stderr_tail) do assert.is_nil(line:find("Is a directory", 1, true), line) end
    end

    it("fails an open that runs out of descriptors with limit_exceeded, leaving no directory", function()
      local from_sandbox = false
      for limit = 40, 47 do
        local conn, root = start_limited(limit)
        local opened, failed = until_one_fails(function()
          return conn:call("open", ph.open_params(profile_of(profile)), {timeout = 10})
        end)
        assert_failed_cleanly(conn, root, opened, failed, "open at " .. limit .. " descriptors")
        from_sandbox = from_sandbox or failed.error.message:find("sandbox", 1, true) ~= nil
      end
      if profile == "bwrap/default" then assert.is_true(from_sandbox, "no failure in the sandbox's own start") end
    end)

    it("fails a fork that runs out of descriptors with limit_exceeded, leaving no directory", function()
      for limit = 40, 47 do
        local conn, root = start_limited(limit)
        local parent = ph.open(conn, profile_of(profile))
        sh(conn, parent, [[mkdir -p a/b/c d/e && echo x > a/b/c/f && echo y > d/e/g && echo z > "$TMPDIR/t"]])
        local forks, failed = until_one_fails(function()
          return ph.op(conn, parent, "fork", {}, {timeout = 10})
        end)
        table.insert(forks, 1, parent)
        assert_failed_cleanly(conn, root, forks, failed, "fork at " .. limit .. " descriptors")
      end
    end)

    it("answers a close whose directory cannot be removed with an error naming it; it goes when the provider stops", function()
      if not ph.IS_ROOT then pending("needs root to mount") return end
      local conn, root = start_limited(1024)
      local s = ph.open(conn, profile_of(profile))
      local mnt = root .. "/" .. ph.list(root)[1] .. "/" .. s.id .. "/tmp/m"
      assert(os.execute("mkdir " .. mnt .. " && mount -t tmpfs smolwf-spec " .. mnt))
      local closed = conn:call("close", s)
      os.execute("umount " .. mnt)
      assert.equals("io_error", closed.error and closed.error.code, closed.error and closed.error.message)
      assert.matches("/" .. s.id .. " could not be removed: Device or resource busy", closed.error.message, 1, true)
      assert.same({s.id}, ph.list(root .. "/" .. ph.list(root)[1]))
      assert.same({}, conn:call("shutdown", {}).result)
      assert.is_true(conn:wait_exit(10))
      assert.same({}, ph.list(root))
    end)

    it("bounds the bytes waiting for a process's stdin", function()
      local conn = ph.start()
      local s = ph.open(conn, profile_of(profile))
      local id = ph.op(conn, s, "spawn", {argv = {"sleep", "60"}}).result.process_id
      local chunk = ph.b64(string.rep("x", 8 * 1024 * 1024))
      local reqs = {}
      for i = 1, 6 do reqs[i] = conn:send("write_stdin", {session = s, process_id = id, data_base64 = chunk}) end
      -- a write is answered once written, which `sleep` never lets happen: only refusals come back
      local function answered()
        local n = 0
        for _, r in ipairs(reqs) do n = n + (r.done and 1 or 0) end
        return n
      end
      assert.is_true(ph.wait_until(function() return answered() >= 4 end, 30), answered() .. " refusals came")
      assert.is_true(conn:call("describe", {}).result ~= nil)   -- served after every write_stdin line
      assert.equals(4, answered())
      for _, r in ipairs(reqs) do
        if r.done then assert_refused(r, "limit_exceeded", "stdin") end
      end
      assert.same({}, ph.op(conn, s, "kill", {process_id = id, signal = "KILL"}).result)
    end)
  end)
end

describe("provider hardening: lines", function()
  after_each(function()
    ph.stop_all()
  end)

  -- Sends a raw line expecting replies under id; returns the request record.
  local function raw(conn, id, line)
    local req = conn:send_line(id, "raw", line)
    conn:wait(req, 5)
    return req
  end

  it("refuses duplicate keys, by the request's id, at any depth", function()
    local conn = start_recording()
    local r = raw(conn, 1, '{"id":1,"method":"shutdown","method":"describe"}')
    assert_refused(r, "invalid_request", "duplicate key `method`")
    local s = ph.open(conn)
    local env = raw(conn, 2, ph.encode({id = 2, method = "exec", params = {session = s, argv = {"true"}}})
      :gsub('"argv"', '"env":{"A":"1","A":"2"},"argv"'))
    assert.matches("duplicate key `A`", env.error.message)
    assert.equals(0, #conn.null_replies)
    assert.is_table(conn:call("describe", {}).result)
  end)

  it("echoes ids exactly or refuses them: integers below 2^53, strings without NUL", function()
    local conn = start_recording()
    raw(conn, 9007199254740991, '{"id":9007199254740991,"method":"describe"}')
    assert.matches('^{"id":9007199254740991,"result"', conn.raw_lines[#conn.raw_lines])
    conn:send_raw('{"id":9007199254740993,"method":"describe"}')
    conn:send_raw('{"id":"a\\u0000b","method":"describe"}')
    assert.is_true(ph.wait_until(function() return #conn.null_replies == 2 end, 5))
    for _, reply in ipairs(conn.null_replies) do assert.equals("invalid_request", reply.error.code) end
    assert.same({}, conn.violations)
  end)

  it("answers each request of a line that holds two, and refuses text after a request", function()
    local conn = start_recording()
    local one, two = conn:track(1, "describe"), conn:track(2, "describe")
    conn:send_raw('{"id":1,"method":"describe"} {"id":2,"method":"describe"}')
    assert.is_true(conn:wait(one, 5) and conn:wait(two, 5))
    for _, r in ipairs({one, two}) do
      assert_refused(r, "invalid_request", "one request per line")
    end
    local trailing = raw(conn, 3, '{"id":3,"method":"describe"} xyz')
    assert_refused(trailing, "invalid_request", "text after the request")
  end)

  it("refuses NUL in a method or a path instead of reading up to it", function()
    local conn = start_recording()
    local m = raw(conn, 4, '{"id":4,"method":"describe\\u0000shutdown"}')
    assert_refused(m, "invalid_request", "NUL")
    local s = ph.open(conn)
    local line = ph.encode({id = 5, method = "write_file", params = {session = s, path = "PATH", content_base64 = ""}})
    local w = raw(conn, 5, (line:gsub("PATH", "x\\u0000/../..")))
    assert.equals("invalid_request", w.error and w.error.code)
    assert.same({}, ph.op(conn, s, "list_dir", {path = "."}).result.entries)
    assert.is_table(conn:call("describe", {}).result)
  end)

  it("refuses a path component longer than 255 bytes before creating anything", function()
    local conn = start_recording()
    local s = ph.open(conn)
    local long = string.rep("c", 300)
    for _, method in ipairs({"create_dir_all", "write_file", "stat"}) do
      local r = ph.op(conn, s, method, {path = "a/" .. long .. "/b", content_base64 = ""})
      assert_refused(r, "invalid_request", "longer than 255 bytes", method)
    end
    assert.same({}, ph.op(conn, s, "list_dir", {path = "."}).result.entries)
  end)

  it("writes only valid UTF-8: a line that is not UTF-8, messages cut at a byte count", function()
    local conn = start_recording()
    conn:send_raw("\255\254 not json")
    local bad = raw(conn, 6, '{"id":6,"method":"describe","params":{"x":"\255"}}')
    assert_refused(bad, "invalid_request", "not valid UTF%-8")
    conn:send_raw("x" .. string.rep("€", 40))
    local long_method = raw(conn, 7, ph.encode({id = 7, method = string.rep("€", 30)}))
    assert.equals("unknown_method", long_method.error.code)
    local s = ph.open(conn)
    local long_path = string.rep(string.rep("€", 80) .. "/", 6)
    assert.is_table(ph.op(conn, s, "read_file", {path = long_path}).error)
    assert.is_true(ph.wait_until(function() return #conn.null_replies == 2 end, 5))
    assert_lines_utf8(conn)
    assert.same({}, conn.violations)
  end)

  it("names `params` when a request has none", function()
    local conn = ph.start()
    local r = raw(conn, 8, '{"id":8,"method":"read_file"}')
    assert_refused(r, "invalid_request", "`params`")
  end)
end)

describe("provider hardening: a local session's processes when the provider is killed", function()
  after_each(function()
    ph.stop_all()
  end)

  it("leaves no command and no grandchild running after SIGKILL", function()
    local root = ph.tempdir()
    local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = root}})
    local s = ph.open(conn)
    local ids, pids = {}, {}
    for i = 1, 50 do
      -- half of the grandchildren leave their group too, as a daemon would
      local script = (i % 2 == 0 and "setsid " or "") .. "sleep 300 & echo $! $$; exec sleep 300"
      ids[i] = ph.op(conn, s, "spawn", {argv = {"sh", "-c", script}}).result.process_id
    end
    for _, id in ipairs(ids) do
      local out = ""
      assert.is_true(ph.wait_until(function()
        out = out .. ph.unb64(ph.op(conn, s, "wait", {process_id = id, timeout_ms = 0}).result.stdout_base64)
        return out:find("\n", 1, true) ~= nil
      end, 10))
      for pid in out:gmatch("%d+") do pids[#pids + 1] = pid end
    end
    assert.equals(100, #pids)
    conn.proc:kill("KILL")
    assert.is_true(conn:wait_exit(5))
    conn.proc:close()
    assert.is_true(ph.wait_until(function()
      for _, pid in ipairs(pids) do if ph.alive(pid) then return false end end
      return true
    end, 10), "a process of the session outlived its provider")
    local next_one = ph.start({env_extra = {XDG_RUNTIME_DIR = root}})
    ph.open(next_one)   -- and its files go with the next provider's sweep (on a job from here)
    assert.is_true(ph.wait_until(function() return #ph.list(root) == 1 end, 10), "the killed provider's root stayed")
  end)
end)

describe("provider hardening: /etc in a bwrap session", function()
  after_each(function()
    ph.stop_all()
  end)

  it("shows every file of /etc that others may not read as empty, and such directories as empty", function()
    local finder = io.popen("find /etc -xdev ! -perm -o=r \\( -type f -o -type d \\) -printf '%y %p\\n' 2>/dev/null")
    local files, dirs = {}, {}
    for line in finder:lines() do
      local kind, path = line:match("^(%a) (.*)$")
      if kind == "f" then files[#files + 1] = path else dirs[#dirs + 1] = path end
    end
    finder:close()
    local conn = ph.start()
    local s = ph.open(conn, profile_of("bwrap/default"))
    local script = [[for f in "$@"; do
      if [ -d "$f" ]; then [ -n "$(ls -A "$f" 2>/dev/null)" ] && echo "listed: $f"
      else n=$(cat "$f" 2>/dev/null | wc -c); [ "$n" -gt 0 ] && echo "read $n bytes: $f"; fi
    done; true]]
    local argv = {"sh", "-c", script, "sh"}
    for _, p in ipairs(files) do argv[#argv + 1] = p end
    for _, p in ipairs(dirs) do argv[#argv + 1] = p end
    local r = ph.exec(conn, s, argv)
    assert.equals("", ph.unb64(r.result.stdout_base64))
  end)
end)
