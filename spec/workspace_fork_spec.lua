-- `fork` (host/provider/opening.c): a new session whose workspace and /tmp
-- start as a snapshot of another's, on both backends. Writes on either
-- side after the fork are never seen by the other, nor by the host tree.
-- A close of either side, or shutdown, while the fork copies leaves
-- nothing behind, and a parent closed meanwhile is still copied whole
-- (SMOLWF_PROVIDER_COPY_PACE_MS makes the copy slow enough to act in).
local ph = dofile("spec/fixtures/provider_helpers.lua")
local fs = require "smol.fs"

local function host_tree()
  local dir = ph.tempdir()
  fs.write_file(dir .. "/a.txt", "host a\n")
  fs.write_file(dir .. "/b.txt", "host b\n")
  return dir
end

local function sh(conn, s, script)
  local req = ph.exec(conn, s, {"sh", "-c", script})
  assert(req.result, "exec failed")
  return ph.unb64(req.result.stdout_base64)
end

local function fork(conn, s)
  local req = ph.op(conn, s, "fork", {})
  assert(req.result, "fork failed")
  return req.result
end

local function bwrap_works(conn)
  for _, p in ipairs(conn:call("describe", {}).result.profiles) do
    if p.name == "bwrap/default" then return p.isolation == "namespaces" end
  end
end

local profiles = {
  {name = "local/default", mechanism = "copy", workspace = "copy"},
  {name = "bwrap/default", mechanism = "overlay", workspace = "overlay"},
  {name = "bwrap/default", mechanism = "copy", workspace = "copy", env = {SMOLWF_PROVIDER_NO_OVERLAY = "1"}},
}

for _, p in ipairs(profiles) do
  local label = p.name .. (p.env and " (overlay refused)" or "")
  describe("fork of a " .. label .. " session", function()
    after_each(function() ph.stop_all() end)

    local conn, parent, dir
    before_each(function()
      conn = ph.start({env_extra = p.env})
      dir = host_tree()
      local provider, name = p.name:match("(.*)/(.*)")
      if provider == "bwrap" and not bwrap_works(conn) then return end
      parent = ph.open(conn, {profile = {provider = provider, name = name}, workspace_sync = {host_path = dir}})
      sh(conn, parent, "mkdir -p sub && echo parent > sub/p1; rm a.txt; echo tmp > $TMPDIR/t")
    end)

    it("starts from the parent's workspace and tmp as they are, in its cwd", function()
      if not parent then pending("bubblewrap does not work here") return end
      assert.is_true(parent.capabilities.fork)
      local child = fork(conn, parent)
      assert.not_equals(parent.id, child.id)
      assert.equals(p.workspace, child.capabilities.workspace)
      assert.equals(parent.profile, child.profile)
      assert.equals("b.txt\nsub\nparent\ntmp\n", sh(conn, child, "ls; cat sub/p1 $TMPDIR/t"))
      assert.equals("parent\n", ph.unb64(ph.op(conn, child, "read_file", {path = "sub/p1"}).result.content_base64))
    end)

    it("keeps writes on each side from the other and from the host tree", function()
      if not parent then pending("bubblewrap does not work here") return end
      local child = fork(conn, parent)
      sh(conn, child, "echo child > c1; echo changed > sub/p1; rm b.txt; echo ct > $TMPDIR/t")
      sh(conn, parent, "echo later > p2")
      assert.equals("b.txt\np2\nsub\nparent\ntmp\n", sh(conn, parent, "ls; cat sub/p1 $TMPDIR/t"))
      assert.equals("c1\nsub\nchanged\nct\n", sh(conn, child, "ls; cat sub/p1 $TMPDIR/t"))
      assert.equals("host a\n", fs.read_file(dir .. "/a.txt"))
      assert.equals("host b\n", fs.read_file(dir .. "/b.txt"))
      assert.same({"a.txt", "b.txt"}, (function() local l = ph.list(dir); table.sort(l); return l end)())
    end)

    it("can be forked again, and outlives its parent", function()
      if not parent then pending("bubblewrap does not work here") return end
      local child = fork(conn, parent)
      sh(conn, child, "echo one > gen")
      local grandchild = fork(conn, child)
      assert.same({}, conn:call("close", parent).result)
      assert.same({}, conn:call("close", child).result)
      assert.equals("one\nparent\n", sh(conn, grandchild, "cat gen sub/p1"))
    end)
  end)
end

describe("fork", function()
  after_each(function() ph.stop_all() end)

  it("of an overlay session works for an ordinary user too, whiteouts included", function()
    if not ph.IS_ROOT then pending("needs root to drop to nobody") return end
    local dir, base = host_tree(), ph.tempdir()
    assert(os.execute("chown -R nobody:nogroup " .. dir .. " && chmod 777 " .. base))
    local conn = ph.start({prefix = ph.AS_NOBODY, env_extra = {XDG_RUNTIME_DIR = base}})
    if not bwrap_works(conn) then pending("bubblewrap does not work here") return end
    local parent = ph.open(conn, {profile = {provider = "bwrap", name = "default"}, workspace_sync = {host_path = dir}})
    sh(conn, parent, "rm a.txt; echo p > p")
    local child = fork(conn, parent)
    assert.equals("overlay", child.capabilities.workspace)
    assert.equals("b.txt\np\n65534\n", sh(conn, child, "ls; id -u"))
  end)

  it("fails naming itself when the parent has a file it may not read", function()
    if not ph.IS_ROOT then pending("needs root to drop to nobody") return end
    local base = ph.tempdir()
    assert(os.execute("chmod 777 " .. base))
    local conn = ph.start({prefix = ph.AS_NOBODY, env_extra = {XDG_RUNTIME_DIR = base}})
    local dir = host_tree()
    assert(os.execute("chmod -R a+rX " .. dir))
    local parent = ph.open(conn, {workspace_sync = {host_path = dir}})
    sh(conn, parent, "echo s > secret && chmod 000 secret")
    local req = ph.op(conn, parent, "fork", {})
    assert.equals("permission_denied", req.error and req.error.code)
    assert.matches("^fork: [^\n]*/secret` is unreadable by the provider", req.error.message)
  end)

  it("refuses a session that works on the host tree itself, and an unknown one", function()
    local conn = ph.start()
    local s = ph.open(conn, {workspace_sync = {host_path = host_tree(), mode = "bind"}})
    local req = ph.op(conn, s, "fork", {})
    assert.equals("unsupported", req.error.code)
    assert.matches("mode \"bind\"", req.error.message)
    assert.equals("unknown_session", conn:call("fork", {session = {id = "s99"}}).error.code)
  end)
end)

local NFILES = 60   -- 2.4 s of copying at 40 ms a file: the first progress event comes at 1 s

-- Session directories under the provider root in base.
local function leftovers(base)
  local found = {}
  for _, root in ipairs(ph.list(base)) do
    for _, name in ipairs(ph.list(base .. "/" .. root)) do found[#found + 1] = name end
  end
  return found
end

for _, name in ipairs({"local/default", "bwrap/default"}) do
  describe("a " .. name .. " fork while it copies", function()
    after_each(function() ph.stop_all() end)

    local conn, base, parent, req
    before_each(function()
      base = ph.tempdir()
      conn = ph.start({env_extra = {XDG_RUNTIME_DIR = base, SMOLWF_PROVIDER_COPY_PACE_MS = "40"}})
      parent = nil
      if name == "bwrap/default" and not bwrap_works(conn) then return end
      parent = ph.open(conn, {profile = {provider = name:match("^(%w+)"), name = "default"}})
      sh(conn, parent, ("mkdir d && for i in $(seq %d); do echo $i > d/f$i; done"):format(NFILES))
      req = conn:send("fork", {session = parent, progress = true})
      assert(ph.wait_until(function() return #req.events > 0 or req.done end, 10), "no progress event")
      assert.is_falsy(req.done, "the fork ended before its first progress event")
    end)

    it("still gets all of a parent closed meanwhile, whose close answers once the parent's files are gone", function()
      if not parent then pending("bubblewrap does not work here") return end
      assert.same({}, conn:call("close", parent, {timeout = 20}).result)
      conn:wait(req, 20)
      local child = assert(req.result, "fork failed")
      assert.equals(0, child.workspace.skipped)
      assert.same({child.id}, leftovers(base))
      assert.equals(NFILES .. "\n", sh(conn, child, "ls d | wc -l"))
    end)

    it("is cancelled by a close naming it, and the parent goes on", function()
      if not parent then pending("bubblewrap does not work here") return end
      assert.same({}, conn:call("close", {id = req.events[1].session}).result)
      conn:wait(req)
      assert.equals("unknown_session", req.error.code)
      assert.same({parent.id}, leftovers(base))
      assert.equals(NFILES .. "\n", sh(conn, parent, "ls d | wc -l"))
    end)

    it("is cancelled by shutdown, which answers the parent's close waiting for it, leaving nothing", function()
      if not parent then pending("bubblewrap does not work here") return end
      local close = conn:send("close", parent)
      conn:send("shutdown", {})
      assert.is_true(conn:wait_exit(10), "the provider did not exit")
      assert.equals(0, conn.exit_code)
      assert.equals("unknown_session", req.error and req.error.code)
      assert.same({}, close.result)
      assert.same({}, ph.list(base))
    end)
  end)
end
