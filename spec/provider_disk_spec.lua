-- The disk and inode caps of the bundled provider (host/provider/disk_cap.c,
-- disk_walk.c, disk_held.c): files at any depth count, so do files a
-- command unlinked and still holds open, `disk_inodes` caps the number of
-- files, no single file takes a session past its cap, and the measure runs
-- off the provider's loop. Each runs on both profiles. Real provider, real
-- commands.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local fs = require "smol.fs"
local cjson = require "cjson"

local MiB = 1048576
local PROFILES = {"local", "bwrap"}

-- A provider whose profiles file gives PROVIDER/capped the limits (run through prefix, when given).
local function start(limits, env, prefix)
  local dir = ph.tempdir()
  assert(os.execute("chmod 755 " .. dir))
  local file = dir .. "/profiles.json"
  fs.write_file(file, cjson.encode{profiles = {
    {name = "local/capped", limits = limits}, {name = "bwrap/capped", limits = limits}}})
  return ph.start{args = {"serve", "--profiles", file}, env_extra = env, prefix = prefix}
end

local function open(conn, base)
  return ph.open(conn, {profile = {provider = base, name = "capped"}})
end

local function sh(conn, s, script, extra)
  return ph.exec(conn, s, {"sh", "-c", script}, extra, {timeout = 60})
end

local function code_of(req)
  return req.error and req.error.code
end

-- The command runs until a measure finds the session over its cap and kills it (long before its timeout).
local function assert_killed(conn, s, script)
  local r = sh(conn, s, script, {timeout_ms = 40000})
  assert.is_table(r.result, cjson.encode(r.error or {}))
  assert.is_falsy(r.result.timed_out)
  assert.equals("KILL", r.result.signal)
end

-- Once killed for it, the session's next command is refused.
local function assert_refused(conn, s)
  local r = sh(conn, s, "true")
  assert.equals("limit_exceeded", code_of(r),
                cjson.encode(r.result or r.error or {}) .. "\n" .. table.concat(conn.stderr_tail, "\n"))
end

-- A process whose main thread ends (it shows as a zombie leader with a live thread), and then its other
-- thread holds three unlinked files of SIZE bytes for 4 s.
local LEADER_GONE = [[
import ctypes, os, sys, threading, time
def hold():
    time.sleep(0.5)
    held = []
    for i in range(3):
        f = open("held%d" % i, "wb")
        os.unlink("held%d" % i)
        f.write(b"x" * int(sys.argv[1]))
        f.flush()
        held.append(f)
    time.sleep(4)
    os._exit(0)
threading.Thread(target=hold).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[os.uname().machine], 0)   # SYS_exit: this thread only
]]

local function leader_gone(conn, s, size)
  return ph.exec(conn, s, {"python3", "-c", LEADER_GONE, tostring(size)}, {timeout_ms = 40000}, {timeout = 60})
end

describe("provider disk cap", function()
  after_each(function() ph.stop_all() end)

  for _, base in ipairs(PROFILES) do
    it("counts files 210 directories deep (" .. base .. ")", function()
      local conn = start{disk_bytes = MiB}
      local s = open(conn, base)
      assert_killed(conn, s, "for i in $(seq 210); do mkdir d && cd d || exit 9; done; " ..
                             "for j in 1 2 3 4; do head -c 400000 /dev/zero > f$j || exit 8; done; sleep 60")
      assert_refused(conn, s)
      local w = ph.op(conn, s, "write_file", {path = "x", content_base64 = ph.b64("x")})
      assert.equals("limit_exceeded", code_of(w))
    end)

    it("counts files unlinked while held open (" .. base .. ")", function()
      local conn = start{disk_bytes = MiB}
      local s = open(conn, base)
      -- three files of 900 kB, each under the cap, removed before they are written (so no measure
      -- can see them in the tree) and held by the shell, which then becomes the sleep
      assert_killed(conn, s, "exec 3>f3 4>f4 5>f5; rm f3 f4 f5; " ..
                             "for i in 3 4 5; do head -c 900000 /dev/zero >&$i; done; exec sleep 60")
      -- the holder is gone, and the space with it: the session may go on
      local after = sh(conn, s, "true")
      assert.is_table(after.result, cjson.encode(after.error or {}) .. "\n" .. table.concat(conn.stderr_tail, "\n"))
      assert.equals(0, after.result.exit_code)
    end)

    it("counts what a process holds after its main thread ended (" .. base .. ")", function()
      local conn = start{disk_bytes = MiB}
      local s = open(conn, base)
      local r = leader_gone(conn, s, 900000)
      assert.is_table(r.result, cjson.encode(r.error or {}))
      assert.equals("KILL", r.result.signal, table.concat(conn.stderr_tail, "\n"))
    end)

    it("caps the number of files with disk_inodes (" .. base .. ")", function()
      local conn = start{disk_inodes = 100}
      local s = open(conn, base)
      assert_killed(conn, s, "mkdir many && cd many && seq 150 | xargs touch && sleep 60")
      assert_refused(conn, s)
      local w = ph.op(conn, s, "write_file", {path = "new", content_base64 = ph.b64("")})
      assert.equals("limit_exceeded", code_of(w))
      assert.matches("inode cap of 100", w.error.message, 1, true)
      ph.op(conn, s, "remove", {path = "many", recursive = true})
      assert.equals(0, sh(conn, s, "true").result.exit_code)
    end)

    it("lets no single file take the session past its cap (" .. base .. ")", function()
      local conn = start{disk_bytes = MiB}
      local s = open(conn, base)
      local w = ph.op(conn, s, "write_file", {path = "a", content_base64 = ph.b64(("a"):rep(600000))})
      assert.is_table(w.result, cjson.encode(w.error or {}))
      -- the command's file-size limit is what was left: it gets SIGXFSZ there
      local r = sh(conn, s, "exec head -c 5000000 /dev/zero > big")
      assert.equals("XFSZ", r.result.signal)
      local big = ph.op(conn, s, "stat", {path = "big"}).result.size
      assert.is_true(600000 + big <= MiB, "big is " .. big)
      -- so the session stays under its cap: the next command runs
      assert.equals(0, sh(conn, s, "true").result.exit_code)
    end)

    it("counts a file with several names once (" .. base .. ")", function()
      local conn = start{disk_bytes = MiB}
      local s = open(conn, base)
      local r = sh(conn, s, "head -c 600000 /dev/zero > a && for i in 1 2 3 4 5; do ln a l$i || exit 9; done")
      assert.equals(0, r.result.exit_code, ph.events_data(r, "stderr"))
      assert.equals(0, sh(conn, s, "true").result.exit_code)
    end)

    it("answers other requests while a measure runs (" .. base .. ")", function()
      -- each directory the measure enters costs it 20 ms: 300 of them take at least 6 s
      local conn = start({disk_bytes = 4 * MiB}, {SMOLWF_PROVIDER_DISK_PACE_MS = "20"})
      local s = open(conn, base)
      local r = sh(conn, s, "mkdir t && cd t && seq 300 | xargs mkdir")
      assert.equals(0, r.result.exit_code)
      -- too big for the cap: refused, but only once a new measure (the slow one) agrees
      local w = conn:send("write_file", {session = s, path = "big", content_base64 = ph.b64(("x"):rep(4 * MiB + 1))})
      local d = conn:call("describe", {})
      assert.is_table(d.result)
      assert.is_falsy(w.done, "write_file was answered before describe: the measure ran on the loop")
      conn:wait(w, 60)
      assert.equals("limit_exceeded", code_of(w))
    end)
  end

  it("kills a local session's commands when one hides its open files from the provider", function()
    -- As an ordinary user, the provider may not read the descriptors of a non-dumpable process.
    local runtime = ph.tempdir()
    assert(os.execute("chmod 777 " .. runtime))
    local conn = start({disk_bytes = MiB}, {XDG_RUNTIME_DIR = runtime}, ph.IS_ROOT and ph.AS_NOBODY or nil)
    local s = open(conn, "local")
    assert_killed(conn, s, "exec python3 -c 'import ctypes, time; ctypes.CDLL(None).prctl(4, 0); time.sleep(60)'")
  end)

  -- As an ordinary user, the provider may not read the descriptors of a thread that has begun to exit (its
  -- memory goes first). Such a thread is not hiding anything: a shell starting a thousand commands a second
  -- keeps running under a cap it never nears.
  for _, base in ipairs(PROFILES) do
    it("does not take a command that is exiting for one that hides its files, as an ordinary user (" .. base .. ")",
       function()
      local runtime = ph.tempdir()
      assert(os.execute("chmod 777 " .. runtime))
      local conn = start({disk_bytes = 64 * MiB}, {XDG_RUNTIME_DIR = runtime}, ph.IS_ROOT and ph.AS_NOBODY or nil)
      local s = open(conn, base)
      local r = sh(conn, s, "end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do /bin/true; /bin/true; done")
      assert.is_table(r.result, cjson.encode(r.error or {}))
      assert.is_nil(r.result.signal, table.concat(conn.stderr_tail, "\n"))
      assert.equals(0, r.result.exit_code)
      -- a main thread that ended before its process does: its files are gone, the process's are counted
      r = leader_gone(conn, s, 100000)
      assert.is_table(r.result, cjson.encode(r.error or {}))
      assert.is_nil(r.result.signal, table.concat(conn.stderr_tail, "\n"))
      assert.equals(0, r.result.exit_code)
    end)
  end

  it("closes a session while its measure runs, answering what waited for it", function()
    local conn = start({disk_bytes = 4 * MiB}, {SMOLWF_PROVIDER_DISK_PACE_MS = "20"})
    local s = open(conn, "local")
    assert.equals(0, sh(conn, s, "mkdir t && cd t && seq 300 | xargs mkdir").result.exit_code)
    local w = conn:send("write_file", {session = s, path = "big", content_base64 = ph.b64(("x"):rep(4 * MiB + 1))})
    assert.is_table(conn:call("close", s).result)
    conn:wait(w, 10)
    assert.equals("unknown_session", code_of(w))
    assert.is_table(conn:call("describe", {}).result)   -- still serving; its clean exit is checked after
  end)
end)
