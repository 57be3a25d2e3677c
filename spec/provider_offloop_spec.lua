-- Work whose time depends on the size of a tree or on another process
-- stays off the provider's loop (host/provider/removing.c, discard.c,
-- root.c, backend_bwrap.c): `remove` of a big tree, a close or shutdown
-- meanwhile, the sweep of an abandoned root, a sandbox helper that stops
-- answering. Other sessions' requests are answered while such work runs;
-- the order of the replies shows it, never a clock.
-- SMOLWF_PROVIDER_REMOVE_PACE_MS makes removal pause after each file, so
-- a removal of NFILES files lasts long enough to act while it runs.
local ph = dofile("spec/fixtures/provider_helpers.lua")

local PROFILES = {"local/default", "bwrap/default"}
local NFILES = 40    -- 2 s of removing at 50 ms a file
local PACE = "50"

local function profile_of(name)
  local provider, pname = name:match("^(.-)/(.*)$")
  return {profile = {provider = provider, name = pname}}
end

-- A provider whose root is made in a fresh directory (returned too), removal paced.
local function start()
  local base = ph.tempdir()
  return ph.start({env_extra = {XDG_RUNTIME_DIR = base, SMOLWF_PROVIDER_REMOVE_PACE_MS = PACE}}), base
end

local function sh(conn, s, script)
  local req = ph.exec(conn, s, {"sh", "-c", script})
  assert.equals(0, req.result and req.result.exit_code, script)
end

-- Session directories under the provider's root in base.
local function session_dirs(base)
  local roots = ph.list(base)
  return #roots == 1 and ph.list(base .. "/" .. roots[1]) or {}
end

-- Requests of session `other` (and a describe) get their replies; true when `slow` was still unanswered after them.
local function served_meanwhile(conn, other, slow)
  assert.is_table(conn:call("describe", {}, {timeout = 10}).result)
  assert.equals(0, ph.exec(conn, other, {"true"}, {}, {timeout = 10}).result.exit_code)
  assert.equals("file", ph.op(conn, other, "stat", {path = "kept"}, {timeout = 10}).result.type)
  return not slow.done
end

for _, profile in ipairs(PROFILES) do
  describe("off the provider's loop, " .. profile .. ":", function()
    after_each(function() ph.stop_all() end)

    local conn, base, a, b
    before_each(function()
      conn, base = start()
      a, b = ph.open(conn, profile_of(profile)), ph.open(conn, profile_of(profile))
      sh(conn, a, ("mkdir -p tree/sub && for i in $(seq %d); do : > tree/sub/f$i; done"):format(NFILES))
      sh(conn, b, ": > kept")
    end)

    it("remove answers once the tree is gone, and other sessions are served meanwhile", function()
      local rm = conn:send("remove", {session = a, path = "tree"})
      assert.is_true(served_meanwhile(conn, b, rm), "the remove was answered before the other session's requests")
      assert.equals("dir", ph.op(conn, a, "stat", {path = "tree"}, {timeout = 10}).result.type)   -- its own session too
      assert.is_true(conn:wait(rm, 30))
      assert.same({}, rm.result)
      assert.equals("not_found", ph.op(conn, a, "stat", {path = "tree"}).error.code)
    end)

    it("a close during a remove is answered after it, and leaves nothing of the session", function()
      local rm = conn:send("remove", {session = a, path = "tree"})
      local closing = conn:send("close", a)
      assert.is_true(served_meanwhile(conn, b, rm))
      assert.is_true(conn:wait(closing, 30))
      assert.same({}, rm.result)
      assert.same({}, closing.result)
      assert.is_true(rm.seq < closing.seq, "the close was answered before the remove")
      assert.same({"s2"}, session_dirs(base))
      assert.equals("unknown_session", ph.op(conn, a, "stat", {path = "."}).error.code)
    end)

    it("a close whose files take long to remove does not stall the other sessions", function()
      local closing = conn:send("close", a)
      assert.is_true(served_meanwhile(conn, b, closing))
      assert.is_true(conn:wait(closing, 30))
      assert.same({}, closing.result)
      assert.same({"s2"}, session_dirs(base))
    end)

    it("shutdown during a remove answers the remove first and leaves nothing", function()
      local rm = conn:send("remove", {session = a, path = "tree"})
      local shut = conn:call("shutdown", {}, {timeout = 30})
      assert.same({}, shut.result)
      assert.same({}, rm.result)
      assert.is_true(rm.seq < shut.seq)
      assert.is_true(conn:wait_exit(10))
      assert.same({}, ph.list(base))
    end)
  end)
end

describe("an abandoned provider root", function()
  after_each(function() ph.stop_all() end)

  -- A root a provider killed by SIGKILL would leave: its pid names no process.
  local function abandoned(base)
    local dir = base .. "/smolwf-provider.999999999.abcdef"
    assert(os.execute(("mkdir -p %s/s1/workspace && cd %s/s1/workspace && for i in $(seq %d); do : > f$i; done")
      :format(dir, dir, NFILES)))
    return dir
  end

  it("is swept while the provider serves the open that made its own root, and other requests", function()
    local base = ph.tempdir()
    local stale = abandoned(base)
    local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = base, SMOLWF_PROVIDER_REMOVE_PACE_MS = PACE}})
    local s = ph.open(conn)
    assert.equals(0, ph.exec(conn, s, {"true"}).result.exit_code)
    assert.is_true(ph.exists(stale), "the open waited for the sweep")
    assert.is_true(ph.wait_until(function() return not ph.exists(stale) end, 30), "never swept")
  end)

  it("is swept whole when the provider stops in the middle of the sweep", function()
    local base = ph.tempdir()
    local stale = abandoned(base)
    local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = base, SMOLWF_PROVIDER_REMOVE_PACE_MS = PACE}})
    ph.open(conn)
    assert.same({}, conn:call("shutdown", {}, {timeout = 30}).result)
    assert.is_true(conn:wait_exit(10))
    assert.is_false(ph.exists(stale))
    assert.same({}, ph.list(base))
  end)
end)

describe("a bubblewrap session whose sandbox helper stops answering", function()
  after_each(function() ph.stop_all() end)

  -- The pids of pid's children (from /proc, every thread's).
  local function children(pid)
    local found = {}
    for _, task in ipairs(ph.list("/proc/" .. pid .. "/task")) do
      for child in (ph.read_host(("/proc/%d/task/%s/children"):format(pid, task)) or ""):gmatch("%d+") do
        found[#found + 1] = tonumber(child)
      end
    end
    return found
  end

  -- The helper of the only sandbox the provider runs: bwrap's child (pid 1 inside).
  local function only_helper(conn)
    local helpers = {}
    for _, pid in ipairs(children(conn.pid)) do
      if (ph.read_host("/proc/" .. pid .. "/comm") or ""):match("^bwrap") then
        for _, child in ipairs(children(pid)) do helpers[#helpers + 1] = {bwrap = pid, helper = child} end
      end
    end
    assert.equals(1, #helpers, "not one sandbox running")
    return helpers[1]
  end

  -- Sessions a and b, a's helper stopped, and 8 spawns sent to a: STARTs of ~100 KB
  -- each, so the control socket is full after a few and the rest wait in the provider.
  local function stop_helper()
    local conn, base = start()
    local a = ph.open(conn, profile_of("bwrap/default"))
    local pids = only_helper(conn)
    local b = ph.open(conn, profile_of("bwrap/default"))
    sh(conn, b, ": > kept")
    assert(os.execute("kill -STOP " .. pids.helper))
    local big = string.rep("x", 100000)
    local spawns = {}
    for i = 1, 8 do spawns[i] = conn:send("spawn", {session = a, argv = {"true", big}}) end
    return conn, base, a, b, pids, spawns
  end

  -- The stuck sandbox is gone, its session refuses commands and closes, the other one goes on.
  local function assert_ended(conn, base, a, b, pids)
    assert.is_true(ph.wait_until(function() return not ph.alive(pids.helper) and not ph.alive(pids.bwrap) end, 10),
      "the stuck sandbox is still there")
    local after = ph.exec(conn, a, {"true"})
    assert.matches("cannot start", after.error and after.error.message)
    assert.same({}, conn:call("close", a, {timeout = 10}).result)
    assert.same({"s2"}, session_dirs(base))
    assert.equals(0, ph.exec(conn, b, {"true"}).result.exit_code)
  end

  it("delays only its own session, whose commands end within their deadline, leaving nothing", function()
    local conn, base, a, b, pids, spawns = stop_helper()
    local timed = conn:send("exec", {session = a, argv = {"sleep", "60"}, timeout_ms = 1000, kill_grace_ms = 100})
    assert.is_true(served_meanwhile(conn, b, timed), "the other session waited for the stopped helper")
    for i = 1, 8 do
      assert.is_true(conn:wait(spawns[i], 5))
      assert.is_string(spawns[i].result and spawns[i].result.process_id)
    end
    -- the exec's deadline passed; its kill is never answered: the sandbox is ended instead
    assert.is_true(conn:wait(timed, 30), "the exec on the stuck session was never answered")
    assert.equals("KILL", timed.result and timed.result.signal)
    assert.equals("wall", timed.result.timed_out)
    assert.matches("session s1: the sandbox helper reported no exit 5000 ms after a SIGKILL .* ending its sandbox",
      table.concat(conn.stderr_tail, "\n"))
    assert_ended(conn, base, a, b, pids)
  end)

  it("is ended when what waits for it is not taken within the deadline", function()
    local conn, base, a, b, pids, spawns = stop_helper()
    assert.is_true(served_meanwhile(conn, b, {}))
    for i = 1, 8 do assert.is_true(conn:wait(spawns[i], 5)) end
    assert.is_true(ph.wait_until(function()
      return table.concat(conn.stderr_tail, "\n"):find("session s1: the sandbox helper took no message for 10000 ms", 1, true) ~= nil
    end, 20), "the stuck helper was never noticed")
    assert_ended(conn, base, a, b, pids)
  end)
end)
