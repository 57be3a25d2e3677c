-- The bundled provider's connection (host/provider/server.c, envelope.c,
-- wire.c, lifecycle.c): ids kept as sent, bad lines, sessions and their capabilities,
-- the three ways to end the provider (shutdown, end of input, SIGTERM)
-- each leaving no process and no directory behind, and output
-- backpressure towards a host that does not read.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local core = require "smol.core"
local lfs = require "lfs"

describe("provider protocol", function()
  after_each(function()
    ph.stop_all()
  end)

  it("keeps ids as sent: 1 and \"1\" are different requests", function()
    local conn = ph.start()
    local s = ph.open(conn)
    local slow = conn:send("exec", {session = s, argv = {"sh", "-c", "sleep 0.2; echo slow"}}, {id = 1})
    local fast = conn:send("exec", {session = s, argv = {"echo", "fast"}}, {id = "1"})
    assert.is_true(conn:wait(slow, 5) and conn:wait(fast, 5))
    assert.equals("slow\n", ph.unb64(slow.result.stdout_base64))
    assert.equals("fast\n", ph.unb64(fast.result.stdout_base64))
    assert.is_true(fast.seq < slow.seq)   -- the long exec did not hold the later request back
    assert.same({}, conn.violations)
  end)

  it("answers bad lines with id null and keeps serving", function()
    local conn = ph.start()
    for _, line in ipairs({"not json", "[1,2]", '{"id":1.5,"method":"describe"}', '{"id":true}',
                           '{"id":9007199254740993000,"method":"describe"}'}) do
      conn:send_raw(line)
    end
    local req = conn:call("describe", {})
    assert.equals(5, #conn.null_replies)
    for _, r in ipairs(conn.null_replies) do assert.equals("invalid_request", r.error.code) end
    assert.equals("smolwf-provider", req.result.provider)
    assert.equals("unknown_method", conn:call("frobnicate", {}).error.code)
  end)

  it("answers an unfinished last line with id null, then exits 0 at end of input", function()
    local conn = ph.start()
    conn.proc:write('{"id":1,"method":"describe"}')   -- no newline
    conn:close_stdin()
    assert.is_true(conn:wait_exit(5))
    assert.equals(0, conn.exit_code)
    assert.equals(1, #conn.null_replies)
    assert.matches("no newline", conn.null_replies[1].error.message)
  end)

  it("echoes large integer ids exactly", function()
    local conn = ph.start()
    local req = conn:call("describe", {}, {id = 1099511627777})
    assert.is_table(req.result)
    assert.same({}, conn.violations)
  end)

  it("announces every extension and says the session is not isolated", function()
    local conn = ph.start()
    local s = ph.open(conn)
    assert.same({exec = true, process = true, timeout = true, signal = true, output_limit = true,
                 fs_extra = true, describe = true, raw_names = true, fork = true, archive = true,
                 session_by_id = true, raw_output = true,
                 isolation = "none", network = true, workspace = "empty"}, s.capabilities)
    assert.equals(s.cwd, s.cwd:match("^/.*/workspace$"))
  end)

  it("refuses an unknown profile and an unknown session", function()
    local conn = ph.start()
    local req = conn:call("open", ph.open_params({profile = {provider = "nope", name = "x"}}))
    assert.equals("invalid_request", req.error.code)
    assert.matches("nope/x", req.error.message)
    assert.equals("unknown_session", conn:call("read_file", {session = {id = "s99"}, path = "a"}).error.code)
    assert.equals("unknown_session", conn:call("close", {id = "s99"}).error.code)
  end)

  it("accepts close with {session = ...} too", function()
    local conn = ph.start()
    local s = ph.open(conn)
    assert.same({}, conn:call("close", {session = s}).result)
  end)

  -- Opens a session with a long-running command; returns what must vanish.
  local function busy_provider()
    local conn = ph.start()
    local s = ph.open(conn)
    local sp = ph.op(conn, s, "spawn", {argv = {"sh", "-c", "sleep 300 & echo $!; exec sleep 300"}})
    local w = ph.op(conn, s, "wait", {process_id = sp.result.process_id, timeout_ms = 300})
    local pids = {}
    for pid in ph.unb64(w.result.stdout_base64):gmatch("%d+") do pids[#pids + 1] = pid end
    local root = ph.session_root(s):match("^(.*)/[^/]+$")
    assert.is_true(#pids == 1 and ph.alive(pids[1]) and ph.exists(root))
    local running = conn:send("exec", {session = s, argv = {"sleep", "300"}})
    return conn, pids[1], root, running
  end

  local function assert_all_gone(conn, pid, root)
    assert.is_true(conn:wait_exit(5))
    assert.equals(0, conn.exit_code)
    assert.is_true(ph.wait_until(function() return not ph.alive(pid) end, 5))
    assert.is_false(ph.exists(root))
  end

  it("on shutdown answers requests in flight, kills everything, removes its files, exits 0", function()
    local conn, pid, root, running = busy_provider()
    local req = conn:call("shutdown", {})
    assert.same({}, req.result)
    assert.equals("unknown_session", running.error.code)
    assert.is_true(running.seq < req.seq)
    assert_all_gone(conn, pid, root)
  end)

  -- The first describe waits for the bubblewrap probe, off the loop: a
  -- shutdown or end of input right behind it gives the probe a second to
  -- end, so the reply says what the machine really has.
  it("answers a first describe that shutdown or end of input follows at once, truly", function()
    local truth = ph.start():call("describe", {}).result.profiles
    local conn = ph.start()
    local describe = conn:send("describe", {})
    local shutdown = conn:send("shutdown", {})
    assert.is_true(conn:wait(shutdown, 10))
    assert.same(truth, describe.result and describe.result.profiles)
    assert.is_true(describe.seq < shutdown.seq)
    conn = ph.start()
    describe = conn:send("describe", {})
    conn:close_stdin()
    assert.is_true(conn:wait_exit(10))
    assert.same(truth, describe.result and describe.result.profiles)
  end)

  it("answers a describe whose probe hangs at shutdown as cancelled, never as no isolation", function()
    local dir = ph.tempdir()
    require("smol.fs").write_file(dir .. "/bwrap", "#!/bin/sh\nexec sleep 60\n")
    assert(os.execute("chmod 755 " .. dir .. "/bwrap"))
    local conn = ph.start({env_extra = {SMOLWF_BWRAP = dir .. "/bwrap"}})
    local describe = conn:send("describe", {})
    conn:send("shutdown", {})
    assert.is_true(conn:wait_exit(5), "the provider waited for the hung probe")
    assert.equals("internal", describe.error and describe.error.code)
    assert.matches("^describe: cancelled: ", describe.error.message)
  end)

  it("on end of input does the same", function()
    local conn, pid, root = busy_provider()
    conn:close_stdin()
    assert_all_gone(conn, pid, root)
  end)

  it("on SIGTERM does the same", function()
    local conn, pid, root = busy_provider()
    conn.proc:kill("TERM")
    assert_all_gone(conn, pid, root)
  end)

  it("keeps its files under $XDG_RUNTIME_DIR when set", function()
    local dir = ph.tempdir()
    local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = dir}})
    local s = ph.open(conn)
    assert.equals(dir, s.cwd:sub(1, #dir))
    conn:stop()
    assert.is_nil(next(ph.list(dir)))
  end)

  it("removes the files of a provider killed by SIGKILL when the next one starts", function()
    local dir = ph.tempdir()
    local killed = ph.start({env_extra = {XDG_RUNTIME_DIR = dir}})
    local root = ph.session_root(ph.open(killed)):match("^(.*)/[^/]+$")
    killed.proc:kill("KILL")
    assert.is_true(killed:wait_exit(5))
    killed.proc:close()
    assert.is_true(ph.exists(root))
    -- named after a live pid (1): left alone while fresh (it may be a provider
    -- between mkdtemp and flock), swept once old (the pid was reused)
    local fresh, reused = dir .. "/smolwf-provider.1.abcdef", dir .. "/smolwf-provider.1.ghijkl"
    assert.is_true(lfs.mkdir(fresh) and lfs.mkdir(reused))
    assert.is_true(lfs.touch(reused, os.time() - 3600, os.time() - 3600))
    local next_one = ph.start({env_extra = {XDG_RUNTIME_DIR = dir}})
    ph.open(next_one)   -- the sweep runs on a job from here
    assert.is_true(ph.wait_until(function() return not ph.exists(root) and not ph.exists(reused) end, 10))
    assert.is_true(ph.exists(fresh))
    ph.stop_all()
  end)

  it("prints usage on --help and refuses unknown commands", function()
    assert.matches("usage: smolwf%-provider serve", io.popen(ph.PROVIDER .. " --help"):read("a"))
    assert.matches("^smolwf%-provider %d", io.popen(ph.PROVIDER .. " --version"):read("a"))
    assert.same({nil, "exit", 2}, {os.execute(ph.PROVIDER .. " frob 2>/dev/null")})
  end)
end)

--[[
Backpressure: the provider's stdout goes into a FIFO this spec does not
read at first. The command writes 64 MiB; if the provider kept reading the
command's pipe it would hold it all in memory. It must instead stop reading
(the command then blocks in write(2) while the provider idles in its event
loop), and the whole stream must arrive once the host reads.
]]
describe("provider backpressure", function()
  after_each(function()
    ph.stop_all()   -- no connection of its own: removes the FIFO's directory, checks no handle is left open
  end)

  local SYS_WRITE, SYS_EPOLL_WAIT = "1", "232"   -- x86_64 syscall numbers, as /proc/PID/syscall shows them

  local function in_syscall(pid, nr)
    local line = ph.read_host("/proc/" .. pid .. "/syscall") or ""
    return line:match("^%d+") == nr
  end

  it("stops reading a command's output while the host does not read its replies", function()
    local dir = ph.tempdir()
    local fifo = dir .. "/out"
    assert.is_true(os.execute("mkfifo " .. fifo))
    local exited = false
    local proc = assert(core.spawn({file = "sh", args = {"sh", "-c", 'exec "$0" serve > "$1"', ph.PROVIDER, fifo},
                                    stdin = true, stdout = "ignore", stderr = "inherit",
                                    on_exit = function(code) exited = code end}))
    local out = assert(io.open(fifo, "rb"))
    -- This spec reads the FIFO with blocking io; writes to the provider need the loop.
    local function send(line)
      proc:write(line .. "\n")
      assert.is_true(ph.wait_until(function() return proc:pending_write_bytes() == 0 end, 5))
    end
    send('{"id":1,"method":"open","params":{"profile":{"provider":"local","name":"default"}}}')
    local s = ph.decode(out:read("l")).result
    local exec = {id = 2, method = "exec", params = {session = s, max_output_bytes = 0,
      argv = {"sh", "-c", "echo $$ > pid; exec head -c 67108864 /dev/zero"}}}
    send(ph.encode(exec))
    local writer
    assert.is_true(ph.wait_until(function()
      writer = writer or (ph.read_host(s.cwd .. "/pid") or ""):match("%d+")
      return writer and in_syscall(writer, SYS_WRITE) and in_syscall(proc.pid, SYS_EPOLL_WAIT)
    end, 10))
    local streamed, result = 0, nil
    for line in out:lines() do
      local msg = ph.decode(line)
      if msg.event and msg.event.type == "stdout" then streamed = streamed + #ph.unb64(msg.event.data_base64) end
      if msg.result and msg.id == 2 then result = msg.result; break end
    end
    assert.equals(64 * 1024 * 1024, streamed)
    assert.equals(0, result.exit_code)
    -- ASan keeps freed memory in quarantine, so the bound only means something without it.
    local sanitized = (ph.read_host("/proc/" .. proc.pid .. "/maps") or ""):find("libasan", 1, true)
    local hwm = tonumber(ph.read_host("/proc/" .. proc.pid .. "/status"):match("VmHWM:%s*(%d+)"))
    assert.is_true(sanitized ~= nil or hwm < 48 * 1024, "provider peak RSS " .. hwm .. " KiB")
    proc:close_stdin()
    assert.is_true(ph.wait_until(function() return exited ~= false end, 5))
    assert.equals(0, exited)
    assert.is_nil(out:read("l"))
    out:close()
    proc:close()
  end)
end)
