-- Overlay workspaces of bubblewrap sessions (host/provider/sandbox_mount.c,
-- opening.c): the host tree as the read-only lower layer, the session's
-- directory as the upper one; file operations see what commands see;
-- excludes hidden; the kernel's refusal falls back to a copy; modes
-- "bind" and "ro"; a profile's own root file system.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local fs = require "smol.fs"

local function bwrap_works()
  local conn = ph.start()
  local req = conn:call("describe", {})
  for _, p in ipairs(req.result.profiles) do
    if p.name == "bwrap/default" then return p.isolation == "namespaces" end
  end
  return false
end
local BWRAP = bwrap_works()
ph.stop_all()

local function write(path, text)
  fs.write_file(path, text)
end

-- A host tree: a file, a nested file, an object file, a build dir, a link out.
local function host_tree()
  local dir = ph.tempdir()
  assert(os.execute(("mkdir -p %s/sub %s/build && ln -s /etc/passwd %s/out"):format(dir, dir, dir)))
  write(dir .. "/a.txt", "hello\n")
  write(dir .. "/sub/b.txt", "nested\n")
  write(dir .. "/sub/c.o", "object\n")
  write(dir .. "/build/x", "built\n")
  return dir
end

local function open_bwrap(conn, sync, extra)
  local fields = {profile = {provider = "bwrap", name = "default"}, workspace_sync = sync}
  for k, v in pairs(extra or {}) do fields[k] = v end
  return ph.open(conn, fields)
end

local function sh(conn, s, script)
  local req = ph.exec(conn, s, {"sh", "-c", script})
  assert(req.result, "exec failed")
  return ph.unb64(req.result.stdout_base64), req.result.exit_code, ph.unb64(req.result.stderr_base64)
end

local function read(conn, s, path)
  local req = ph.op(conn, s, "read_file", {path = path})
  return req.result and ph.unb64(req.result.content_base64), req.error
end

describe("overlay workspaces", function()
  after_each(function() ph.stop_all() end)

  if not BWRAP then
    pending("bubblewrap does not work here")
    return
  end

  it("show the host tree, keep every write in the session, and say they are an overlay", function()
    local conn, dir = ph.start(), host_tree()
    local s = open_bwrap(conn, {host_path = dir})
    assert.equals("overlay", s.capabilities.workspace)
    assert.equals("overlay", s.workspace.mechanism)
    assert.equals("hello\nnested\n", sh(conn, s, "cat a.txt sub/b.txt; echo new > n; rm a.txt; echo more >> sub/b.txt"))
    -- file operations see what commands did, and commands see what they do
    assert.equals("new\n", read(conn, s, "n"))
    assert.equals("nested\nmore\n", read(conn, s, "sub/b.txt"))
    assert.equals("not_found", select(2, read(conn, s, "a.txt")).code)
    assert.truthy(ph.op(conn, s, "write_file", {path = "w", content_base64 = ph.b64("via op")}).result)
    assert.equals("via op", sh(conn, s, "cat w"))
    -- the host tree is untouched
    assert.equals("hello\n", fs.read_file(dir .. "/a.txt"))
    assert.equals("nested\n", fs.read_file(dir .. "/sub/b.txt"))
    assert.is_nil(fs.try_read_file(dir .. "/n"))
    assert.is_nil(fs.try_read_file(dir .. "/w"))
  end)

  it("still refuse a symlink of the lower layer that points out", function()
    local conn, dir = ph.start(), host_tree()
    local s = open_bwrap(conn, {host_path = dir})
    local _, err = read(conn, s, "out")
    assert.equals("permission_denied", err.code)
    assert.equals("symlink", ph.op(conn, s, "stat", {path = "out"}).result.type)
  end)

  it("run commands without capabilities and without a way to make a user namespace", function()
    local conn, dir = ph.start(), host_tree()
    local s = open_bwrap(conn, {host_path = dir})
    local out = sh(conn, s, "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; " ..
                            "unshare -U true 2>/dev/null && echo userns")
    for line in out:gmatch("Cap%a+:%s*(%x+)") do assert.equals("0000000000000000", line) end
    assert.not_matches("userns", out)
    -- the staged layers are unmounted: only their empty mount points are left
    assert.equals("", sh(conn, s, "ls -A /run/smolwf/session; ls -A /run/smolwf/lower"))
  end)

  it("hide what the excludes match, anywhere or anchored", function()
    local conn, dir = ph.start(), host_tree()
    local s = open_bwrap(conn, {host_path = dir, exclude = {"*.o", "/build"}})
    assert.equals("a.txt\nout\nsub\n---\nb.txt\n", sh(conn, s, "ls; echo ---; ls sub"))
    assert.equals("not_found", select(2, read(conn, s, "sub/c.o")).code)
    assert.equals("object\n", fs.read_file(dir .. "/sub/c.o"))
    -- the directory that holds a hidden file still looks like the host's
    assert(os.execute("chmod 750 " .. dir .. "/sub"))
    s = open_bwrap(conn, {host_path = dir, exclude = {"*.o"}})
    assert.equals("750\n", sh(conn, s, "stat -c %a sub"))
  end)

  it("do not show the provider's own directories when the host tree holds them", function()
    local base = ph.tempdir()
    local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = base}})
    write(base .. "/mine.txt", "mine\n")
    local other = open_bwrap(conn, {host_path = ph.null})
    ph.op(conn, other, "write_file", {path = "secret", content_base64 = ph.b64("other session")})
    local s = open_bwrap(conn, {host_path = base})
    local out = sh(conn, s, "ls -A; grep -rl 'other session' . 2>/dev/null")
    assert.equals("mine.txt\n", out)
  end)

  it("fall back to a copy when the kernel refuses the overlay, and say so", function()
    local conn, dir = ph.start({env_extra = {SMOLWF_PROVIDER_NO_OVERLAY = "1"}}), host_tree()
    local s = open_bwrap(conn, {host_path = dir, exclude = {"*.o"}})
    assert.equals("copy", s.capabilities.workspace)
    assert.is_string(s.workspace.overlay_refused)
    assert.equals("hello\nnested\n", sh(conn, s, "cat a.txt sub/b.txt; ls sub/c.o 2>/dev/null; echo x > n"))
    assert.is_nil(fs.try_read_file(dir .. "/n"))
    assert.equals("x\n", read(conn, s, "n"))
  end)

  it("fall back to a copy when bwrap refuses what the overlay needs (as a setuid bwrap refuses --cap-add)", function()
    local bwrap = io.popen("command -v bwrap"):read("l")
    local wrapper = ph.tempdir() .. "/bwrap"
    fs.write_file(wrapper, ("#!/bin/sh\ncase \" $* \" in *' --cap-add '*) " ..
      "echo 'bwrap: --cap-add in setuid mode can be used only by root' >&2; exit 1;; esac\nexec %s \"$@\"\n"):format(bwrap))
    assert(os.execute("chmod 755 " .. wrapper))
    local conn, dir = ph.start({env_extra = {SMOLWF_BWRAP = wrapper}}), host_tree()
    local s = open_bwrap(conn, {host_path = dir})
    assert.equals("copy", s.capabilities.workspace)
    assert.equals("hello\n", sh(conn, s, "cat a.txt"))
    assert.matches("trying again without an overlay", table.concat(conn.stderr_tail, "\n"))
  end)

  it("start again without an overlay when the sandbox with one never says HELLO, and end that one", function()
    local bwrap = io.popen("command -v bwrap"):read("l")
    local dir = ph.tempdir()
    local wrapper, pids = dir .. "/bwrap", dir .. "/pids"
    fs.write_file(wrapper, ("#!/bin/sh\ncase \" $* \" in *' overlay '*) echo $$ >> %s; exec sleep 60;; esac\n" ..
      "exec %s \"$@\"\n"):format(pids, bwrap))
    assert(os.execute("chmod 755 " .. wrapper))
    local conn = ph.start({env_extra = {SMOLWF_BWRAP = wrapper}})
    local req = conn:call("open", ph.open_params({profile = {provider = "bwrap", name = "default"},
                                                  workspace_sync = {host_path = host_tree()}}), {timeout = 30})
    local s = assert(req.result, "open failed")   -- after the first sandbox's start timed out (10 s)
    assert.equals("copy", s.capabilities.workspace)
    assert.equals("hello\n", sh(conn, s, "cat a.txt"))
    assert.matches("did not start within", table.concat(conn.stderr_tail, "\n"))
    local pid = assert(ph.read_host(pids):match("%d+"))
    assert.is_true(ph.wait_until(function() return not ph.alive(pid) end, 10), "the sandbox that hung was left running")
  end)

  it("with mode \"ro\" let nothing write, commands nor file operations", function()
    local conn, dir = ph.start(), host_tree()
    local s = open_bwrap(conn, {host_path = dir, mode = "ro"})
    assert.equals("ro", s.capabilities.workspace)
    local _, code = sh(conn, s, "echo x > a.txt")
    assert.not_equals(0, code)
    local req = ph.op(conn, s, "write_file", {path = "a.txt", content_base64 = ph.b64("x")})
    assert.is_table(req.error)
    assert.equals("hello\n", read(conn, s, "a.txt"))
    assert.equals("hello\n", fs.read_file(dir .. "/a.txt"))
  end)

  it("with mode \"bind\" write the host tree itself", function()
    local conn, dir = ph.start(), host_tree()
    local s = open_bwrap(conn, {host_path = dir, mode = "bind"})
    assert.equals("bind", s.capabilities.workspace)
    sh(conn, s, "echo changed > a.txt")
    ph.op(conn, s, "write_file", {path = "op", content_base64 = ph.b64("op")})
    assert.equals("changed\n", fs.read_file(dir .. "/a.txt"))
    assert.equals("op", fs.read_file(dir .. "/op"))
  end)

  it("refuse a bad mode or exclude, naming the field", function()
    local conn, dir = ph.start(), host_tree()
    local req = conn:call("open", ph.open_params({workspace_sync = {host_path = dir, mode = "rw"}}))
    assert.equals("invalid_request", req.error.code)
    assert.matches("workspace_sync.mode", req.error.message)
    req = conn:call("open", ph.open_params({workspace_sync = {host_path = dir, exclude = {"a/../b"}}}))
    assert.matches("workspace_sync.exclude%[1%]", req.error.message)
    req = conn:call("open", ph.open_params({workspace_sync = {host_path = dir, mode = "bind", exclude = {"x"}}}))
    assert.equals("invalid_request", req.error.code)
    req = conn:call("open", ph.open_params({workspace_sync = {host_path = dir, mode = "ro"}}))
    assert.equals("unsupported", req.error.code)   -- local/default cannot keep commands from writing
  end)

  it("work for an ordinary user too", function()
    if not ph.IS_ROOT then pending("needs root to drop to nobody") return end
    -- a tree of the user's own (overlay cannot copy up what belongs to an id it does not map)
    local dir = host_tree()
    assert(os.execute("chown -R nobody:nogroup " .. dir))
    local base = ph.tempdir()
    assert(os.execute("chmod 777 " .. base))
    local conn = ph.start({prefix = ph.AS_NOBODY, env_extra = {XDG_RUNTIME_DIR = base}})
    local s = open_bwrap(conn, {host_path = dir})
    assert.equals("overlay", s.capabilities.workspace)
    local out = sh(conn, s, "id -u; cat a.txt; echo n > n; rm sub/b.txt; ls sub")
    assert.equals("65534\nhello\nc.o\n", out)
    assert.equals("n\n", read(conn, s, "n"))
    assert.equals("nested\n", fs.read_file(dir .. "/sub/b.txt"))
    -- overlay's work directory (made mode 000) goes too, though the provider is no root
    assert.same({}, conn:call("close", s).result)
    assert.same({}, ph.list(base .. "/" .. ph.list(base)[1]))
    assert.same({}, conn:call("shutdown", {}).result)
    assert.is_true(conn:wait_exit(10))
    assert.same({}, ph.list(base))
  end)
end)

describe("a profile's own root file system", function()
  after_each(function() ph.stop_all() end)

  if not BWRAP then
    pending("bubblewrap does not work here")
    return
  end

  -- A busybox root: /bin of busybox links, an /etc of its own.
  local function busybox_root()
    local busybox = io.popen("command -v busybox"):read("l")
    if not busybox or not io.popen("file -L " .. busybox):read("a"):match("statically linked") then return nil end
    local root = ph.tempdir()
    assert(os.execute(("mkdir -p %s/bin %s/etc && cp %s %s/bin/busybox"):format(root, root, busybox, root)))
    assert(os.execute(("cd %s/bin && for a in $(./busybox --list); do [ $a = busybox ] || ln -s busybox $a; done"):format(root)))
    write(root .. "/etc/os-release", "NAME=busybox-root\n")
    return root
  end

  it("runs commands against that root's /bin and /etc, with the same workspace", function()
    local root = busybox_root()
    if not root then pending("no static busybox (Debian's busybox-static)") return end
    local profiles = ph.tempdir() .. "/profiles.json"
    write(profiles, ph.encode({profiles = {{name = "bwrap/tiny", root = root}}}))
    local conn, dir = ph.start({env_extra = {SMOLWF_PROFILES = profiles}}), host_tree()
    local s = ph.open(conn, {profile = {provider = "bwrap", name = "tiny"}, workspace_sync = {host_path = dir}})
    local out = sh(conn, s, "cat /etc/os-release; ls /usr 2>&1 | head -1; cat a.txt; readlink /bin/sh")
    assert.equals("NAME=busybox-root\nls: /usr: No such file or directory\nhello\nbusybox\n", out)
  end)

  it("is checked at load and at open", function()
    local profiles = ph.tempdir() .. "/profiles.json"
    write(profiles, ph.encode({profiles = {{name = "local/tiny", root = "/tmp"}}}))
    local p = io.popen(("SMOLWF_PROFILES=%s %s serve </dev/null 2>&1"):format(profiles, ph.PROVIDER))
    local said = p:read("a")
    assert.is_nil(p:close())
    assert.matches("profiles%[1%]%.root: needs a bwrap base profile", said)
    write(profiles, ph.encode({profiles = {{name = "bwrap/gone", root = "/nonexistent/root"}}}))
    local conn = ph.start({env_extra = {SMOLWF_PROFILES = profiles}})
    local req = conn:call("open", ph.open_params({profile = {provider = "bwrap", name = "gone"}}))
    assert.equals("not_found", req.error.code)
    assert.matches("/nonexistent/root", req.error.message)
  end)
end)
