-- The bundled provider's file side (host/provider/paths.c, fileops.c,
-- workspace.c): the workspace copy at open, every file operation, and
-- paths that try to leave the session (.., absolute, symlinks made on the
-- host or by a command) refused with permission_denied.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local lfs = require "lfs"

local function sh(cmd)
  assert(os.execute(cmd), cmd)
end

-- Every way out of a session a spec can make: each must be permission_denied.
local function assert_no_escape(conn, s)
  local outside = ph.tempdir()
  ph.exec(conn, s, {"sh", "-c", table.concat({
    "ln -s /etc/passwd passwd", "ln -s /etc etc", "ln -s " .. outside .. " out",
    "mkdir d", "ln -s ../../.. d/up"}, "; ")})
  local cases = {
    {"read_file", {path = "/etc/passwd"}}, {"read_file", {path = "../../../../etc/passwd"}},
    {"read_file", {path = "passwd"}}, {"read_file", {path = "etc/passwd"}},
    {"list_dir", {path = "d/up"}}, {"stat", {path = "d/up/x"}},
    {"write_file", {path = "out/planted", content_base64 = ph.b64("x")}},
    {"write_file", {path = "passwd", content_base64 = ph.b64("x")}},
    {"create_dir_all", {path = "out/sub"}}, {"remove", {path = "out/x"}},
    {"remove", {path = ".."}}, {"create_dir_all", {path = "/usr/local/x"}},
    {"read_file", {path = s.cwd .. "/../../other/workspace/f"}},
  }
  for _, c in ipairs(cases) do
    local req = ph.op(conn, s, c[1], c[2])
    assert.equals("permission_denied", req.error and req.error.code, c[1] .. " " .. c[2].path)
  end
  assert.is_nil(next(ph.list(outside)))
  ph.rm(outside)
end

describe("provider workspace copy at open", function()
  local src, outside

  before_each(function()
    src, outside = ph.tempdir(), ph.tempdir()
    sh(("cd %s && mkdir -p d/e && printf x > d/e/f && printf run > tool && chmod 750 tool"
      .. " && ln -s d/e/f inside && ln -s %s/secret out && ln -s %s outdir && mkfifo fifo"
      .. " && mkdir ro && printf r > ro/r && chmod 500 ro"):format(src, outside, outside))
    sh("printf secret > " .. outside .. "/secret")
  end)

  after_each(function()
    ph.stop_all()
  end)

  it("copies files, modes and links as links, and skips special files", function()
    local conn = ph.start()
    local s = ph.open(conn, {workspace_sync = {host_path = src}})
    local ws = s.cwd
    assert.equals("x", ph.read_host(ws .. "/d/e/f"))
    assert.equals("rwxr-x---", lfs.attributes(ws .. "/tool").permissions)
    assert.equals("r-x------", lfs.attributes(ws .. "/ro").permissions)
    assert.equals("r", ph.read_host(ws .. "/ro/r"))
    assert.equals("link", lfs.symlinkattributes(ws .. "/inside").mode)
    assert.equals("d/e/f", lfs.symlinkattributes(ws .. "/inside").target)
    assert.equals(outside .. "/secret", lfs.symlinkattributes(ws .. "/out").target)
    assert.is_false(ph.exists(ws .. "/fifo"))
    -- A link that leads out is kept as a link, but file operations do not follow it.
    assert.equals("x", ph.unb64(ph.op(conn, s, "read_file", {path = "inside"}).result.content_base64))
    assert.equals("permission_denied", ph.op(conn, s, "read_file", {path = "out"}).error.code)
    assert.equals("permission_denied", ph.op(conn, s, "list_dir", {path = "outdir"}).error.code)
    -- Commands change the copy, never the host's files.
    ph.exec(conn, s, {"sh", "-c", "printf changed > d/e/f"})
    assert.equals("x", ph.read_host(src .. "/d/e/f"))
  end)

  it("gives an empty workspace without host_path, not_found for a missing one", function()
    local conn = ph.start()
    local s = ph.open(conn, {workspace_sync = {host_path = ""}})
    assert.same({}, ph.op(conn, s, "list_dir", {path = "."}).result.entries)
    local req = conn:call("open", ph.open_params({workspace_sync = {host_path = src .. "/missing"}}))
    assert.equals("not_found", req.error.code)
    assert.matches("missing", req.error.message)
  end)

  it("takes a cwd relative to the workspace, which must exist", function()
    local conn = ph.start()
    local s = ph.open(conn, {workspace_sync = {host_path = src}, cwd = "d/e"})
    assert.matches("/workspace/d/e$", s.cwd)
    assert.equals("x", ph.unb64(ph.op(conn, s, "read_file", {path = "f"}).result.content_base64))
    local req = conn:call("open", ph.open_params({workspace_sync = {host_path = src}, cwd = "nope"}))
    assert.equals("not_found", req.error.code)
    req = conn:call("open", ph.open_params({cwd = "../.."}))
    assert.equals("permission_denied", req.error.code)
  end)
end)

describe("provider workspace copy: what it leaves out", function()
  after_each(function()
    ph.stop_all()
  end)

  it("skips directories tagged as caches (CACHEDIR.TAG with the signature)", function()
    local src = ph.tempdir()
    sh(("cd %s && mkdir -p .smolwf/run1 cache fake && printf x > .smolwf/run1/report.json"
      .. " && printf 'Signature: 8a477f597d28d172789f06886806bc55\\n# made by smolwf\\n' > .smolwf/CACHEDIR.TAG"
      .. " && printf 'Signature: 8a477f597d28d172789f06886806bc55' > cache/CACHEDIR.TAG && printf c > cache/c"
      .. " && printf 'Signature: not the one\\n' > fake/CACHEDIR.TAG && printf k > keep"):format(src))
    local conn = ph.start()
    local s = ph.open(conn, {workspace_sync = {host_path = src}})
    assert.is_false(ph.exists(s.cwd .. "/.smolwf"))
    assert.is_false(ph.exists(s.cwd .. "/cache"))
    assert.equals("Signature: not the one\n", ph.read_host(s.cwd .. "/fake/CACHEDIR.TAG"))
    assert.equals("k", ph.read_host(s.cwd .. "/keep"))
    -- The directory the user names is copied even when it is tagged itself.
    local s2 = ph.open(conn, {workspace_sync = {host_path = src .. "/cache"}})
    assert.equals("c", ph.read_host(s2.cwd .. "/c"))
  end)

  it("does not copy the provider's own root when the workspace contains it", function()
    local src = ph.tempdir()
    sh(("printf k > %s/keep && mkdir %s/sub"):format(src, src))
    -- $XDG_RUNTIME_DIR inside the workspace puts the provider's root (and so the new session) there.
    local conn = ph.start{env_extra = {XDG_RUNTIME_DIR = src}}
    local s = ph.open(conn, {workspace_sync = {host_path = src}})
    assert.equals(src, ph.session_root(s):match("^(.*)/smolwf%-provider%.[^/]+/[^/]+$"))
    local names = ph.list(s.cwd)
    table.sort(names)
    assert.same({"keep", "sub"}, names)
    -- A host_path inside the root itself: the sessions there are left out too.
    local root = ph.session_root(s):match("^(.*)/[^/]+$")
    local s2 = ph.open(conn, {workspace_sync = {host_path = root}})
    assert.same({}, ph.list(s2.cwd))
  end)

  it("fails closed on an unreadable file or directory, naming it", function()
    local src = ph.tempdir()
    sh(("chmod 755 %s && printf ok > %s/ok && printf s > %s/secret && chmod 600 %s/secret"):format(src, src, src, src))
    local prefix = ph.IS_ROOT and ph.AS_NOBODY or nil
    if not ph.IS_ROOT then sh("chmod 000 " .. src .. "/secret") end
    local conn = ph.start{prefix = prefix}
    local req = conn:call("open", ph.open_params({workspace_sync = {host_path = src}}))
    assert.equals("permission_denied", req.error and req.error.code)
    assert.matches("`" .. src .. "/secret` is unreadable", req.error.message, 1, true)
    assert.matches("^open: ", req.error.message)   -- as the request's other errors are
    sh(("rm %s/secret && mkdir -m 700 %s/private"):format(src, src))
    if not ph.IS_ROOT then sh("chmod 000 " .. src .. "/private") end
    req = conn:call("open", ph.open_params({workspace_sync = {host_path = src}}))
    assert.equals("permission_denied", req.error and req.error.code)
    assert.matches("`" .. src .. "/private` is unreadable", req.error.message, 1, true)
  end)
end)

describe("provider file operations", function()
  local conn, s

  before_each(function()
    conn = ph.start()
    s = ph.open(conn)
  end)

  after_each(function()
    ph.stop_all()
  end)

  local function op(method, params) return ph.op(conn, s, method, params) end

  it("writes, reads, appends and reads ranges", function()
    local data = "\0\1\2\255" .. ("z"):rep(1000)
    assert.same({}, op("write_file", {path = "f.bin", content_base64 = ph.b64(data)}).result)
    assert.equals(data, ph.unb64(op("read_file", {path = "f.bin"}).result.content_base64))
    op("write_file", {path = "f.bin", content_base64 = ph.b64("END"), append = true})
    local r = op("read_file", {path = "f.bin", offset = 1002, length = 5}).result
    assert.same({"zzEND", true}, {ph.unb64(r.content_base64), r.eof})
    r = op("read_file", {path = "f.bin", offset = 0, length = 2}).result
    assert.same({"\0\1", false}, {ph.unb64(r.content_base64), r.eof})
    r = op("read_file", {path = "f.bin", offset = 5000}).result
    assert.same({"", true}, {ph.unb64(r.content_base64), r.eof})
  end)

  it("applies write_file's mode to a new file", function()
    op("write_file", {path = "x.sh", content_base64 = ph.b64("#!/bin/sh\necho hi\n"), mode = 448})
    assert.equals(448, op("stat", {path = "x.sh"}).result.mode)
    assert.equals("hi\n", ph.unb64(ph.exec(conn, s, {"./x.sh"}).result.stdout_base64))
  end)

  it("answers the documented errors", function()
    assert.equals("not_found", op("read_file", {path = "missing"}).error.code)
    assert.equals("not_found", op("remove", {path = "missing"}).error.code)
    assert.equals("not_found", op("stat", {path = "missing"}).error.code)
    assert.equals("not_found", op("write_file", {path = "no/dir/f", content_base64 = ""}).error.code)
    op("create_dir_all", {path = "d"})
    assert.equals("is_a_directory", op("read_file", {path = "d"}).error.code)
    assert.equals("is_a_directory", op("write_file", {path = "d", content_base64 = ""}).error.code)
    op("write_file", {path = "file", content_base64 = ""})
    assert.equals("not_a_directory", op("create_dir_all", {path = "file/sub"}).error.code)
    assert.equals("invalid_request", op("write_file", {path = "f", content_base64 = "%%%"}).error.code)
    assert.equals("invalid_request", op("read_file", {}).error.code)
    local e = op("read_file", {path = "missing"}).error
    assert.matches("read_file `missing`", e.message)
  end)

  it("creates directories idempotently and removes whole trees", function()
    assert.same({}, op("create_dir_all", {path = "a/b/c"}).result)
    assert.same({}, op("create_dir_all", {path = "a/b/c"}).result)
    op("write_file", {path = "a/b/c/f", content_base64 = ph.b64("1")})
    ph.exec(conn, s, {"chmod", "500", "a/b"})
    assert.same({}, op("remove", {path = "a"}).result)
    assert.is_false(ph.exists(s.cwd .. "/a"))
    assert.equals("permission_denied", op("remove", {path = "."}).error.code)
  end)

  it("makes temp dirs in the session's temp area", function()
    local p1 = op("create_temp_dir", {prefix = "build-"}).result.path
    local p2 = op("create_temp_dir", {prefix = "build-"}).result.path
    assert.are_not.equal(p1, p2)
    assert.equals(ph.session_root(s) .. "/tmp/", p1:match("^(.*/)build%-%w+$"))
    op("write_file", {path = p1 .. "/x", content_base64 = ph.b64("t")})
    assert.equals("t", ph.read_host(p1 .. "/x"))
    assert.equals("invalid_request", op("create_temp_dir", {prefix = "../x"}).error.code)
  end)

  it("stats and lists without following links", function()
    op("write_file", {path = "a.txt", content_base64 = ph.b64("abc")})
    ph.exec(conn, s, {"ln", "-s", "a.txt", "link"})
    local st = op("stat", {path = "link"}).result
    assert.equals("symlink", st.type)
    st = op("stat", {path = "a.txt"}).result
    assert.same({"file", 3}, {st.type, st.size})
    assert.is_true(math.abs(st.mtime - os.time()) < 60)
    assert.equals("dir", op("stat", {path = "."}).result.type)
    local names = {}
    for _, e in ipairs(op("list_dir", {path = "."}).result.entries) do names[#names + 1] = e.name .. ":" .. e.type end
    assert.same({"a.txt:file", "link:symlink"}, names)
  end)

  it("refuses every way out of the session with permission_denied", function()
    assert_no_escape(conn, s)
  end)

  it("reaches the session's files by absolute and relative paths", function()
    op("write_file", {path = s.cwd .. "/abs", content_base64 = ph.b64("1")})
    assert.equals("1", ph.unb64(op("read_file", {path = "./x/../abs"}).result.content_base64))
    assert.equals("1", ph.unb64(op("read_file", {path = "abs"}).result.content_base64))
  end)
end)

-- Where openat2 is missing (Linux < 5.6, some seccomp filters) the provider
-- walks paths itself and follows no link at all: stricter, never weaker.
describe("provider file operations without openat2", function()
  after_each(function()
    ph.stop_all()
  end)

  it("still reaches the session's files and refuses every way out", function()
    local conn = ph.start({env_extra = {SMOLWF_PROVIDER_NO_OPENAT2 = "1"}})
    local s = ph.open(conn)
    assert.same({}, ph.op(conn, s, "create_dir_all", {path = "a/b"}).result)
    ph.op(conn, s, "write_file", {path = "a/b/f", content_base64 = ph.b64("w")})
    assert.equals("w", ph.unb64(ph.op(conn, s, "read_file", {path = s.cwd .. "/a/b/f"}).result.content_base64))
    assert.equals("not_found", ph.op(conn, s, "read_file", {path = "a/nope"}).error.code)
    assert_no_escape(conn, s)
  end)
end)
