-- The bundled provider's processes (host/provider/process.c,
-- process_methods.c, spawn.c, backend_local.c): exec and spawn streaming,
-- stdin, environment, exit codes, process groups, timeouts, kill,
-- buffered spawn output, and that nothing a session started outlives its
-- close. Real provider, real commands, local/default profile.
local ph = dofile("spec/fixtures/provider_helpers.lua")

describe("provider processes", function()
  local conn, s

  before_each(function()
    conn = ph.start({env_extra = {SMOLWF_SPEC_LEAK = "must-not-leak"}})
    s = ph.open(conn)
  end)

  after_each(function()
    ph.stop_all()
  end)

  it("streams started, output chunks and exited before the result, bytes intact", function()
    local req = ph.exec(conn, s, {"sh", "-c", [[printf '\000\001\377'; printf 'e\000' >&2; exit 3]]})
    assert.is_table(req.result)
    assert.equals("started", req.events[1].type)
    assert.matches("^p%d+$", req.events[1].process_id)
    assert.same({type = "exited", exit_code = 3}, req.events[#req.events])
    assert.equals("\0\1\255", ph.events_data(req, "stdout"))
    assert.equals("e\0", ph.events_data(req, "stderr"))
    assert.equals("\0\1\255", ph.unb64(req.result.stdout_base64))
    assert.equals("e\0", ph.unb64(req.result.stderr_base64))
    assert.equals(3, req.result.exit_code)
  end)

  it("gives a missing program exit code 127 and one stderr line naming it", function()
    local req = ph.exec(conn, s, {"no-such-program-xyz", "arg"})
    assert.equals(127, req.result.exit_code)
    local err = ph.unb64(req.result.stderr_base64)
    assert.matches("^[^\n]*no%-such%-program%-xyz[^\n]*\n$", err)
  end)

  it("gives a program found but not executable exit code 126", function()
    ph.op(conn, s, "write_file", {path = "script", content_base64 = ph.b64("#!/bin/sh\n"), mode = 420})
    local req = ph.exec(conn, s, {"./script"})
    assert.equals(126, req.result.exit_code)
    assert.matches("script", ph.unb64(req.result.stderr_base64))
  end)

  it("builds the environment from the base, the request and nothing of the provider's", function()
    local req = ph.exec(conn, s, {"env"}, {env = {FOO = "bar", LANG = "C"}})
    local env = {}
    for k, v in ph.unb64(req.result.stdout_base64):gmatch("([^=\n]+)=([^\n]*)") do env[k] = v end
    assert.same({PATH = env.PATH, HOME = s.cwd, LANG = "C", TMPDIR = ph.session_root(s) .. "/tmp",
                 FOO = "bar"}, env)
    assert.matches("/usr/bin", env.PATH)
  end)

  it("applies a profile's rlimits and environment before the command runs", function()
    local dir = ph.tempdir()
    local file = dir .. "/profiles.json"
    local f = assert(io.open(file, "w"))
    f:write('{"profiles": [{"name": "local/limited", "env": {"FROM_PROFILE": "yes"},'
      .. ' "limits": {"open_files": 16, "file_size": 4096}}]}')
    f:close()
    local c = ph.start({args = {"serve", "--profiles", file}})
    local ls = ph.open(c, {profile = {provider = "local", name = "limited"}})
    local req = ph.exec(c, ls, {"sh", "-c", "grep -E 'open files|file size' /proc/self/limits; echo $FROM_PROFILE"})
    local out = ph.unb64(req.result.stdout_base64)
    assert.matches("Max file size%s+4096%s+4096", out)
    assert.matches("Max open files%s+16%s+16", out)
    assert.matches("yes\n$", out)
    req = ph.exec(c, ls, {"sh", "-c", "exec head -c 8192 /dev/zero > big"})
    assert.same({153, "XFSZ"}, {req.result.exit_code, req.result.signal})
  end)

  it("refuses an env entry that is not a string", function()
    local req = ph.exec(conn, s, {"true"}, {env = {FOO = 1}})
    assert.equals("invalid_request", req.error.code)
    assert.matches("FOO", req.error.message)
  end)

  it("runs in the session cwd by default and in a given relative cwd", function()
    ph.op(conn, s, "create_dir_all", {path = "sub/dir"})
    assert.equals(s.cwd .. "\n", ph.unb64(ph.exec(conn, s, {"pwd"}).result.stdout_base64))
    local req = ph.exec(conn, s, {"pwd"}, {cwd = "sub/dir"})
    assert.equals(s.cwd .. "/sub/dir\n", ph.unb64(req.result.stdout_base64))
    assert.equals("not_found", ph.exec(conn, s, {"pwd"}, {cwd = "nope"}).error.code)
    assert.equals("permission_denied", ph.exec(conn, s, {"pwd"}, {cwd = "/etc"}).error.code)
  end)

  it("feeds exec stdin data then end of file, and an empty closed stdin when null", function()
    local req = ph.exec(conn, s, {"cat"}, {stdin_base64 = ph.b64("in\0put")})
    assert.equals("in\0put", ph.unb64(req.result.stdout_base64))
    req = ph.exec(conn, s, {"cat"}, {stdin_base64 = ph.null}, {timeout = 5})
    assert.equals(0, req.result.exit_code)
    assert.equals("", ph.unb64(req.result.stdout_base64))
  end)

  it("starts each command as the leader of its own process group", function()
    local req = ph.exec(conn, s, {"sh", "-c", [[echo $$; cut -d' ' -f5 /proc/$$/stat]]})
    local pid, pgid = ph.unb64(req.result.stdout_base64):match("^(%d+)\n(%d+)\n$")
    assert.equals(pid, pgid)
  end)

  it("starts each command with no signal blocked or ignored (the provider ignores SIGPIPE)", function()
    local req = ph.exec(conn, s, {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"})
    assert.equals("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n", ph.unb64(req.result.stdout_base64))
  end)

  it("is SCHED_BATCH while idle, SCHED_OTHER while commands run, and starts them SCHED_OTHER", function()
    -- field 41 of /proc/PID/stat: 0 = SCHED_OTHER, 3 = SCHED_BATCH (see host/provider/relay_sched.c)
    local function policy() return ph.read_host("/proc/" .. conn.pid .. "/stat"):match("^%d+ %(.-%) " .. ("%S+ "):rep(38) .. "(%d+)") end
    assert.equals("3", policy())
    local req = ph.exec(conn, s, {"sh", "-c", [[cut -d' ' -f41 /proc/$$/stat; cut -d' ' -f41 /proc/$PPID/stat]]})
    assert.equals("0\n0\n", ph.unb64(req.result.stdout_base64))
    -- idle again once its bookkeeping after the result is done
    assert.is_true(ph.wait_until(function() return policy() == "3" end, 5))
  end)

  it("keeps output a background descendant writes after the command exited", function()
    local req = ph.exec(conn, s, {"sh", "-c", "(sleep 0.3; echo late; echo late-err >&2) & echo early"})
    assert.equals(0, req.result.exit_code)
    assert.equals("early\nlate\n", ph.unb64(req.result.stdout_base64))
    assert.equals("late-err\n", ph.unb64(req.result.stderr_base64))
    assert.equals("exited", req.events[#req.events].type)
  end)


  it("answers once a descendant ends the one stream it kept, the other ended at the exit", function()
    local req = ph.exec(conn, s, {"sh", "-c", "(exec >/dev/null; sleep 0.3; echo late-err >&2) & echo early"})
    assert.equals(0, req.result.exit_code)
    assert.equals("early\n", ph.unb64(req.result.stdout_base64))
    assert.equals("late-err\n", ph.unb64(req.result.stderr_base64))
    assert.same({type = "exited", exit_code = 0}, req.events[#req.events])
    -- the session still runs commands: nothing was left half-closed
    assert.equals("ok\n", ph.unb64(ph.exec(conn, s, {"echo", "ok"}).result.stdout_base64))
  end)
  it("lets kill end a running exec by its process_id", function()
    local pid
    local req = conn:send("exec", {session = s, argv = {"sleep", "30"}},
      {on_event = function(ev) if ev.type == "started" then pid = ev.process_id end end})
    assert.is_true(ph.wait_until(function() return pid ~= nil end, 5))
    assert.same({}, ph.op(conn, s, "kill", {process_id = pid, signal = "KILL"}).result)
    assert.is_true(conn:wait(req, 5))
    assert.equals(137, req.result.exit_code)
    assert.equals("KILL", req.result.signal)
    assert.equals("invalid_request", ph.op(conn, s, "kill", {process_id = pid, signal = "NOPE"}).error.code)
  end)

  it("on a wall timeout kills the whole group, grandchildren holding the pipes too", function()
    local req = ph.exec(conn, s, {"sh", "-c", "sleep 30 & echo started; sleep 30"},
      {timeout_ms = 200}, {timeout = 5})
    assert.equals("wall", req.result.timed_out)
    assert.equals(143, req.result.exit_code)
    assert.equals("started\n", ph.unb64(req.result.stdout_base64))
  end)

  it("caps the captured copy at max_output_bytes and still streams everything", function()
    local req = ph.exec(conn, s, {"head", "-c", "300000", "/dev/zero"}, {max_output_bytes = 1000})
    assert.equals(1000, #ph.unb64(req.result.stdout_base64))
    assert.is_true(req.result.stdout_truncated)
    assert.equals(300000, #ph.events_data(req, "stdout"))
    req = ph.exec(conn, s, {"true"}, {max_output_bytes = 1024 * 1024 * 1024})
    assert.equals("invalid_request", req.error.code)
    assert.matches("max_output_bytes", req.error.message)
  end)

  it("passes write_stdin to a spawned command and answers its output on wait", function()
    local sp = ph.op(conn, s, "spawn", {argv = {"cat"}})
    local pid = sp.result.process_id
    assert.same({}, ph.op(conn, s, "write_stdin", {process_id = pid, data_base64 = ph.b64("hel")}).result)
    assert.same({}, ph.op(conn, s, "write_stdin", {process_id = pid, data_base64 = ph.b64("lo"), eof = true}).result)
    local w = ph.op(conn, s, "wait", {process_id = pid}, {timeout = 5})
    assert.equals("hello", ph.unb64(w.result.stdout_base64))
    assert.equals("hello", ph.events_data(w, "stdout"))
    assert.equals(0, w.result.exit_code)
    assert.equals("unknown_process", ph.op(conn, s, "wait", {process_id = pid}).error.code)
  end)

  it("keeps the last 1 MiB of a spawned process's output and says how much it dropped", function()
    local total = 3 * 1024 * 1024
    local sp = ph.op(conn, s, "spawn", {argv = {"sh", "-c",
      "seq 1 1000000 2>/dev/null | head -c " .. total .. "; touch done"}})
    local done = s.cwd .. "/done"
    assert.is_true(ph.wait_until(function() return ph.exists(done) end, 10))
    local w = ph.op(conn, s, "wait", {process_id = sp.result.process_id}, {timeout = 10})
    local dropped = w.events[1]
    assert.same({type = "dropped", stream = "stdout", bytes = dropped.bytes}, dropped)
    local got = ph.unb64(w.result.stdout_base64)
    assert.equals(total, dropped.bytes + #got)
    assert.is_true(#got >= 1024 * 1024)
    local full = io.popen("seq 1 1000000 2>/dev/null | head -c " .. total):read("a")
    assert.equals(full:sub(-#got), got)
  end)

  it("kills every process of a session at close, grandchildren left in the group included", function()
    local req = ph.exec(conn, s, {"sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"})
    local orphan = ph.unb64(req.result.stdout_base64):match("%d+")
    local sp = ph.op(conn, s, "spawn", {argv = {"sh", "-c", "echo $$; exec sleep 300"}})
    local w = ph.op(conn, s, "wait", {process_id = sp.result.process_id, timeout_ms = 300})
    local spawned = ph.unb64(w.result.stdout_base64):match("%d+")
    assert.is_true(ph.alive(orphan) and ph.alive(spawned))
    local root = ph.session_root(s)
    assert.same({}, conn:call("close", s).result)
    assert.is_true(ph.wait_until(function() return not ph.alive(orphan) and not ph.alive(spawned) end, 5))
    assert.is_false(ph.exists(root))
    assert.equals("unknown_session", ph.exec(conn, s, {"true"}).error.code)
  end)

  -- field 4 of /proc/PID/stat is the parent, 3 the state
  local function stat_field(pid, n)
    local stat = ph.read_host("/proc/" .. pid .. "/stat")
    return stat and stat:match("%) (.*)"):match(("%S+ "):rep(n - 3) .. "(%S+)")
  end

  it("kills at close the processes that left its groups (setsid), running or re-parented to it", function()
    -- the shell exits at once: its setsid child is re-parented to the provider, a child subreaper
    local req = ph.exec(conn, s, {"sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"})
    local orphan = ph.unb64(req.result.stdout_base64):match("%d+")
    assert.is_true(ph.wait_until(function() return stat_field(orphan, 4) == tostring(conn.pid) end, 5))
    -- this one's parent still runs at close
    local sp = ph.op(conn, s, "spawn", {argv = {"sh", "-c", "setsid sleep 301 >/dev/null 2>&1 & echo $!; exec sleep 302"}})
    local w = ph.op(conn, s, "wait", {process_id = sp.result.process_id, timeout_ms = 300})
    local escaped = ph.unb64(w.result.stdout_base64):match("%d+")
    assert.is_true(ph.alive(orphan) and ph.alive(escaped))
    assert.same({}, conn:call("close", s).result)
    assert.is_false(ph.exists("/proc/" .. orphan), "killed and reaped")
    assert.is_true(ph.wait_until(function() return not ph.alive(escaped) end, 5))
  end)

  it("reaps the processes re-parented to it when they exit, and kills those left at shutdown", function()
    ph.exec(conn, s, {"sh", "-c", "(sleep 0.2 &); true"})
    -- an orphan without the session's TMPDIR is not the session's to kill at close
    local req = ph.exec(conn, s, {"sh", "-c", "env -u TMPDIR setsid sleep 303 >/dev/null 2>&1 & echo $!"})
    local unclaimed = ph.unb64(req.result.stdout_base64):match("%d+")
    assert.is_true(ph.wait_until(function()
      ph.exec(conn, s, {"true"})   -- an exit: the provider reaps what else exited
      for dir in io.popen("ls /proc"):lines() do
        if dir:match("^%d+$") and stat_field(dir, 4) == tostring(conn.pid) and stat_field(dir, 3) == "Z" then return false end
      end
      return true
    end, 5), "no zombie child of the provider")
    assert.same({}, conn:call("close", s).result)
    assert.is_true(ph.alive(unclaimed))
    assert.is_true(conn:stop())
    assert.is_true(ph.wait_until(function() return not ph.alive(unclaimed) end, 5))
  end)

  it("answers close only once the processes it killed are gone, its own children reaped", function()
    -- Members that take a while to die (each frees 32 MiB it touched), so a
    -- reply sent right after the signals would find them still there. Each
    -- blocks opening a FIFO nobody writes, and says it is ready on its own line.
    local hog = "x = ('x'):rep(1 << 25); print('ready'); io.stdout:flush(); io.open('fifo'):read()"
    local req = ph.exec(conn, s, {"sh", "-c", "mkfifo fifo; for i in 1 2 3 4; do lua5.4 -e \"" .. hog
                                   .. "\" >>ready 2>&1 & echo $!; done"})
    local pids = {}
    for pid in ph.unb64(req.result.stdout_base64):gmatch("%d+") do pids[#pids + 1] = pid end
    assert.is_true(ph.wait_until(function() return select(2, (ph.read_host(s.cwd .. "/ready") or ""):gsub("ready", "")) == 4 end, 10))
    local sp = ph.op(conn, s, "spawn", {argv = {"sh", "-c", "echo $$; exec sleep 300"}})
    local w = ph.op(conn, s, "wait", {process_id = sp.result.process_id, timeout_ms = 300})
    local child = ph.unb64(w.result.stdout_base64):match("%d+")
    assert.equals(4, #pids)
    assert.is_true(ph.alive(child))
    assert.same({}, conn:call("close", s).result)
    local alive = {}
    for _, pid in ipairs(pids) do if ph.alive(pid) then alive[#alive + 1] = pid end end
    assert.same({}, alive)
    assert.is_false(ph.exists("/proc/" .. child), "the provider's own child is reaped, not a zombie")
  end)

  it("answers a write_stdin still pending at close before the close itself", function()
    local sp = ph.op(conn, s, "spawn", {argv = {"sleep", "30"}})
    local big = ("x"):rep(1024 * 1024)   -- more than the pipe holds, and nobody reads it
    local w = conn:send("write_stdin", {session = s, process_id = sp.result.process_id, data_base64 = ph.b64(big)})
    local c = conn:call("close", s)
    assert.same({}, c.result)
    assert.is_true(conn:wait(w, 5))
    assert.equals("unknown_session", w.error.code)
    assert.is_true(w.seq < c.seq)
  end)

  it("answers an exec in flight with an error when its session is closed", function()
    local req = conn:send("exec", {session = s, argv = {"sleep", "30"}})
    assert.same({}, conn:call("close", s).result)
    assert.is_true(conn:wait(req, 5))
    assert.equals("unknown_session", req.error.code)
  end)
end)
