-- Workspace copies off the provider's loop (host/provider/opening.c,
-- workspace.c, job.c): excludes, files that vanish or turn unreadable in
-- the middle of a copy, progress events, other sessions served meanwhile,
-- and every way to give up on a long open leaving nothing behind, also
-- while the open waits for its sandbox or for the bubblewrap probe.
-- SMOLWF_PROVIDER_COPY_PACE_MS makes the copy pause after each file, so
-- the spec can act while it runs; a stand-in for bwrap makes a sandbox
-- that never starts.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local fs = require "smol.fs"

local PACE = {SMOLWF_PROVIDER_COPY_PACE_MS = "40"}
local NFILES = 60   -- 2.4 s of copying at that pace: the first progress event comes at 1 s

local function tree(n)
  local dir = ph.tempdir()
  assert(os.execute(("mkdir -p %s/d && cd %s/d && for i in $(seq %d); do echo file $i > f$i; done"):format(dir, dir, n)))
  return dir
end

-- A provider whose root is a fresh directory, so the spec can see what it leaves there.
local function start(env, opts)
  local base = ph.tempdir()
  local env_extra = {XDG_RUNTIME_DIR = base}
  for k, v in pairs(env or {}) do env_extra[k] = v end
  local o = {env_extra = env_extra}
  for k, v in pairs(opts or {}) do o[k] = v end
  return ph.start(o), base
end

-- Session directories left under a provider root in base (roots themselves go when the provider ends).
local function leftovers(base)
  local found = {}
  for _, root in ipairs(ph.list(base)) do
    for _, name in ipairs(ph.list(base .. "/" .. root)) do found[#found + 1] = root .. "/" .. name end
  end
  return found
end

local function slow_open(conn, dir, extra)
  local params = ph.open_params({workspace_sync = {host_path = dir}, progress = true})
  for k, v in pairs(extra or {}) do params[k] = v end
  return conn:send("open", params)
end

local function first_progress(req)
  assert(ph.wait_until(function() return #req.events > 0 or req.done end, 10), "no progress event")
  assert.is_falsy(req.done, "the open ended before its first progress event")
  return req.events[1]
end

describe("workspace copies", function()
  after_each(function() ph.stop_all() end)

  it("leave out what the exclude patterns match", function()
    local conn = start()
    local dir = ph.tempdir()
    assert(os.execute(("mkdir -p %s/.git/objects %s/src/gen %s/node_modules/x && touch %s/.git/HEAD %s/src/a.c " ..
                       "%s/src/a.o %s/src/gen/b.o %s/keep.o %s/node_modules/x/i.js"):format(dir, dir, dir, dir, dir, dir, dir, dir, dir)))
    local s = ph.open(conn, {workspace_sync = {host_path = dir, exclude = {".git", "node_modules/", "*.o", "!keep.o"}}})
    assert.equals("copy", s.capabilities.workspace)
    local out = ph.unb64(ph.exec(conn, s, {"sh", "-c", "find . | sort"}).result.stdout_base64)
    assert.equals(".\n./keep.o\n./src\n./src/a.c\n./src/gen\n", out)
  end)

  it("report progress while they run, and serve other sessions meanwhile", function()
    local conn = start(PACE)
    local req = slow_open(conn, tree(NFILES))
    local other = ph.open(conn)
    local exec = ph.exec(conn, other, {"true"})
    assert.equals(0, exec.result.exit_code)
    assert.is_falsy(req.done)   -- the slow open is still copying
    local ev = first_progress(req)
    assert.equals("progress", ev.type)
    assert.equals("copy", ev.phase)
    assert.is_true(ev.files >= 1 and ev.files < NFILES)
    assert.matches("^s%d+$", ev.session)
    conn:wait(req, 20)
    assert.equals(NFILES, req.result.workspace.files)
    assert.equals(0, req.result.workspace.skipped)
  end)

  it("skip files that vanish in the middle, with a warning, and still open", function()
    local conn = start(PACE)
    local dir = tree(NFILES)
    local req = slow_open(conn, dir)
    first_progress(req)
    ph.rm(dir .. "/d")
    conn:wait(req, 20)
    assert.is_table(req.result, "open failed")
    local ws = req.result.workspace
    assert.is_true(ws.skipped >= 1)
    assert.equals(NFILES, ws.files + ws.skipped)
    assert.matches("vanished during the copy; skipped", ws.warnings[1])
  end)

  it("fail with permission_denied naming a file made unreadable in the middle, leaving nothing", function()
    if not ph.IS_ROOT then pending("needs root to drop to nobody") return end
    local dir = tree(NFILES)
    assert(os.execute("chmod -R a+rwX " .. dir))
    local conn, base = start(PACE, {prefix = ph.AS_NOBODY})
    assert(os.execute("chmod 777 " .. base))
    local req = slow_open(conn, dir)
    first_progress(req)
    assert(os.execute("chmod 000 " .. dir .. "/d/*"))
    conn:wait(req, 20)
    assert.equals("permission_denied", req.error.code)
    assert.truthy(req.error.message:find(dir .. "/d/f", 1, true), req.error.message)
    assert.matches("/d/f%d+` is unreadable by the provider", req.error.message)
    assert.same({}, leftovers(base))
  end)

  it("are cancelled by a close naming the opening session, which answers once its files are gone", function()
    local conn, base = start(PACE)
    local req = slow_open(conn, tree(NFILES))
    local ev = first_progress(req)
    local closed = conn:call("close", {id = ev.session})
    assert.same({}, closed.result)
    conn:wait(req)
    assert.equals("unknown_session", req.error.code)
    assert.same({}, leftovers(base))
    assert.is_table(conn:call("describe", {}).result)
  end)

  for _, how in ipairs({"shutdown", "end of input", "SIGTERM", "SIGINT"}) do
    it("are cancelled by " .. how .. ", and the provider leaves nothing behind", function()
      local conn, base = start(PACE)
      local req = slow_open(conn, tree(NFILES))
      first_progress(req)
      if how == "shutdown" then conn:send("shutdown", {})
      elseif how == "end of input" then conn:close_stdin()
      else conn.proc:kill(how:sub(4)) end
      assert.is_true(conn:wait_exit(10), "the provider did not exit")
      assert.equals(0, conn.exit_code)
      assert.is_true(req.done)
      assert.same({}, ph.list(base))
    end)
  end

  it("of a bubblewrap session whose overlay the kernel refused are cancelled with its sandbox", function()
    local env = {SMOLWF_PROVIDER_NO_OVERLAY = "1", SMOLWF_PROVIDER_COPY_PACE_MS = "40"}
    local conn, base = start(env)
    local req = slow_open(conn, tree(NFILES), {profile = {provider = "bwrap", name = "default"}})
    if not ph.wait_until(function() return #req.events > 0 or req.done end, 10) or req.error then
      pending("bubblewrap does not work here")
      return
    end
    local session = req.events[1].session
    assert.equals("copy", req.events[1].phase)
    local procs = io.popen("pgrep -x bwrap -P " .. conn.pid):read("a")
    assert.not_equals("", procs)   -- the sandbox (bwrap, the provider's child) is up while the copy runs
    assert.same({}, conn:call("close", {id = session}).result)
    conn:wait(req)
    assert.equals("unknown_session", req.error.code)
    assert.same({}, leftovers(base))
    for pid in procs:gmatch("%d+") do assert.is_false(ph.alive(pid), "sandbox process " .. pid .. " left running") end
  end)
end)

-- A stand-in for bwrap ($SMOLWF_BWRAP) whose sandboxes never say HELLO: each
-- notes its pid in the returned file, then sleeps. The probe (`true` inside)
-- runs the real bwrap unless hang_probe. bwrap runs with PATH alone, so the
-- paths are written in. nil when there is no bwrap to stand in for.
local function stalling_bwrap(hang_probe)
  local real = io.popen("command -v bwrap"):read("l")
  if not real then return nil end
  local dir = ph.tempdir()
  fs.write_file(dir .. "/bwrap", table.concat({
    "#!/bin/sh",
    "for last; do :; done",
    hang_probe and "" or ('[ "$last" = true ] && exec %s "$@"'):format(real),
    ("echo $$ >> %s/pids"):format(dir),
    "exec sleep 60", ""}, "\n"))
  assert(os.execute("chmod 755 " .. dir .. "/bwrap"))
  return dir .. "/bwrap", dir .. "/pids"
end

-- The pid the stand-in noted first, once its whole line is written; nil if none came within 10 s.
local function stand_in_pid(pids)
  local pid
  ph.wait_until(function()
    pid = (ph.read_host(pids) or ""):match("^(%d+)\n")
    return pid ~= nil
  end, 10)
  return pid
end

local function stop_by(conn, how)
  if how == "shutdown" then conn:send("shutdown", {}) else conn:close_stdin() end
  assert.is_true(conn:wait_exit(5), "the provider did not exit at once")
  assert.equals(0, conn.exit_code)
end

local BWRAP = {profile = {provider = "bwrap", name = "default"}}

describe("opens waiting for their sandbox", function()
  after_each(function() ph.stop_all() end)

  for _, how in ipairs({"close", "shutdown", "end of input"}) do
    it("are cancelled by " .. how .. " before HELLO: the sandbox ends and the session's files go", function()
      local bwrap, pids = stalling_bwrap(false)
      if not bwrap then pending("no bubblewrap here") return end
      local conn, base = start({SMOLWF_BWRAP = bwrap})
      local req = conn:send("open", ph.open_params({profile = BWRAP.profile, progress = true}))
      if not ph.wait_until(function() return #req.events > 0 or req.done end, 10) or req.error then
        pending("bubblewrap does not work here")
        return
      end
      local ev = req.events[1]
      assert.equals("sandbox", ev.phase)
      local pid = assert(stand_in_pid(pids), "the stand-in sandbox did not start")
      if how == "close" then
        assert.same({}, conn:call("close", {id = ev.session}, {timeout = 10}).result)
        assert.same({}, leftovers(base))
      else
        stop_by(conn, how)
        assert.same({}, ph.list(base))
      end
      assert.is_true(req.done)
      assert.equals("unknown_session", req.error.code)
      assert.is_false(ph.alive(pid), "the sandbox " .. pid .. " was left running")
    end)
  end

  for _, how in ipairs({"shutdown", "end of input"}) do
    it("end at " .. how .. " while the bubblewrap probe runs, without waiting for its sandbox", function()
      local bwrap, pids = stalling_bwrap(true)
      if not bwrap then pending("no bubblewrap here") return end
      local conn, base = start({SMOLWF_BWRAP = bwrap})
      local req = conn:send("open", ph.open_params(BWRAP))
      local pid = assert(stand_in_pid(pids), "the probe did not start")
      stop_by(conn, how)   -- the probe itself would wait 10 s
      assert.equals("unknown_session", req.error.code)
      assert.is_false(ph.alive(pid), "the probe's sandbox " .. pid .. " was left running")
      assert.same({}, ph.list(base))
    end)
  end
end)
