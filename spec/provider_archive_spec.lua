-- The bundled provider's `archive` extension (host/provider/archive_*.c, unpack.c,
-- pack.c): tar archives streamed into a session (write_archive) and out of it
-- (read_archive), on local/default and bwrap/default; hostile archives (made by
-- Python's tarfile and GNU tar, spec/fixtures/hostile_tars.py) refused with an
-- error naming the entry, and nothing written outside the session.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local archive_stream = require "smol.provider.conformance.archive_stream"
local cjson = require "cjson"
local fs = require "smol.fs"
local lfs = require "lfs"

local PROFILES = {"local", "bwrap"}
local MiB = 1024 * 1024

-- s as a Lua pattern that matches it literally.
local function lit(s)
  return (s:gsub("%p", "%%%0"))
end

local function q(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
  assert(os.execute(cmd), cmd)
end

-- The stdout of a shell script run in the session; raises when it fails.
local function run(conn, s, script)
  local req = ph.exec(conn, s, {"sh", "-c", script})
  assert(req.result, cjson.encode(req.error or {lost = req.lost}))
  local out = ph.unb64(req.result.stdout_base64)
  assert(req.result.exit_code == 0, script .. ": " .. ph.unb64(req.result.stderr_base64))
  return out
end

-- Every entry below dir (type, mode, size, link target) by relative path, not following
-- links, but for the workspace of the session named skip (in the provider's root).
local function snapshot(dir, skip, into, prefix)
  into, prefix = into or {}, prefix or ""
  for name in lfs.dir(dir) do
    local path, rel = dir .. "/" .. name, prefix .. name
    local skipped = rel:match("^xdg/smolwf%-provider%.[^/]+/([^/]+)/workspace$") == skip
    local a = name ~= "." and name ~= ".." and not skipped and lfs.symlinkattributes(path)
    if a then
      into[rel] = table.concat({a.mode, a.permissions, a.size, a.target or ""}, " ")
      if a.mode == "directory" then snapshot(path, skip, into, rel .. "/") end
    end
  end
  return into
end

local function assert_same_tree(before, after)
  for path, what in pairs(after) do assert.equals(before[path], what, "changed outside the session: " .. path) end
  for path in pairs(before) do assert.is_not_nil(after[path], "removed outside the session: " .. path) end
end

-- A tree of files a test packs: modes, a symlink, an empty directory, binary and multi-chunk data.
local TREE_SCRIPT = table.concat({
  "mkdir -p tree/sub/deeper tree/empty",
  "printf hello > tree/a.txt && chmod 640 tree/a.txt",
  "head -c 3000000 /dev/urandom > tree/sub/big.bin",
  "printf '\\000\\001\\377' > tree/sub/deeper/bytes",
  "printf run > tree/tool && chmod 750 tree/tool",
  "ln -s sub/deeper/bytes tree/link",
  "chmod 700 tree/sub/deeper",
  "touch -d 2001-02-03T04:05:06 tree/a.txt tree/sub/big.bin",
}, " && ")

-- What must come through a copy unchanged: types, modes, sizes, file and link times, link targets, contents.
local LISTING = "cd tree && find . -mindepth 1 \\( -type d -printf '%y %m %p\\n' \\) -o -printf '%y %m %s %T@ %p %l\\n' "
  .. "| sort && find . -type f -exec cksum {} + | sort"

describe("provider archive extension", function()
  local tars, base

  setup(function()
    tars = fs.temp_dir("smolwf-archive-tars")
    base = fs.temp_dir("smolwf-archive-spec")
    assert(lfs.mkdir(base .. "/outside"))
    fs.write_file(base .. "/outside/secret", "secret")
    sh(("python3 spec/fixtures/hostile_tars.py %s %s"):format(q(tars), q(base .. "/outside")))
  end)

  teardown(function()
    ph.rm(tars)
    ph.rm(base)
  end)

  after_each(function()
    ph.stop_all()
  end)

  local function tar(name)
    return assert(fs.read_file(tars .. "/" .. name))
  end

  -- A provider whose root lies in `base`, so every `..` a hostile name climbs stays where the snapshot sees it.
  local function start(extra)
    local opts = {env_extra = {XDG_RUNTIME_DIR = base .. "/xdg"}}
    for k, v in pairs(extra or {}) do opts[k] = v end
    lfs.mkdir(base .. "/xdg")
    return ph.start(opts)
  end

  local function open(conn, profile, fields)
    fields = fields or {}
    fields.profile = fields.profile or {provider = profile, name = "default"}
    return ph.open(conn, fields)
  end

  for _, profile in ipairs(PROFILES) do
    describe("on " .. profile .. "/default", function()
      it("announces the archive capability", function()
        local s = open(start(), profile)
        assert.is_true(s.capabilities.archive)
      end)

      it("moves a tree from one session to another unchanged", function()
        local conn = start()
        local from, to = open(conn, profile), open(conn, profile)
        run(conn, from, TREE_SCRIPT)
        local out = archive_stream.read(conn, from, {"tree"}, {window = 2})
        assert.is_nil(out.problem)
        assert.is_table(out.result, cjson.encode(out.error or {}))
        assert.equals(#out.data, out.result.bytes)
        assert.equals(9, out.result.entries)
        assert.is_true(out.chunks >= 3, "a 3 MB tree comes in several chunks")
        local into = archive_stream.write(conn, to, out.data)
        assert.is_table(into.result, cjson.encode(into.error or {}))
        assert.same({archive_id = into.archive_id, entries = 9, bytes = #out.data}, into.result)
        assert.equals(run(conn, from, LISTING), run(conn, to, LISTING))
      end)

      it("extracts into the directory named by path, which must exist", function()
        local conn = start()
        local s = open(conn, profile)
        run(conn, s, "mkdir -p target/here")
        local w = archive_stream.write(conn, s, tar("modes.tar"), {path = "target/here"})
        assert.is_table(w.result)
        assert.equals("inner", run(conn, s, "cat target/here/ro/inner.txt"))
        w = archive_stream.write(conn, s, tar("modes.tar"), {path = "missing"})
        assert.equals("not_found", w.error.code)
        assert.matches("missing", w.error.message)
        w = archive_stream.write(conn, s, tar("modes.tar"), {path = "/etc"})
        assert.equals("permission_denied", w.error.code)
      end)

      it("refuses hostile archives, naming the entry, and writes nothing outside the session", function()
        local conn = start()
        local cases = {
          {"absolute", "permission_denied", "entry `" .. lit(base) .. "/outside/abs.txt`: name .* is absolute"},
          {"dotdot", "permission_denied", "entry `%.%./%.%./%.%./escape.txt`: name .* has a `%.%.` component"},
          {"dotdot_inner", "permission_denied", "entry `a/b/%.%./%.%./%.%./escape.txt`"},
          {"symlink_out", "permission_denied", "entry `l`: symlink to `" .. lit(base) .. "/outside` points outside"},
          {"symlink_up", "permission_denied", "entry `l`: symlink to `%.%./%.%./%.%./%.%.` points outside"},
          {"symlink_through", "permission_denied", "entry `l/x.txt`: `l` is a symlink; entries are never written through"},
          {"planted_link", "permission_denied", "entry `out/pwned.txt`: `out` is a symlink"},
          {"hardlink_abs", "permission_denied", "entry `h`: hard link target `" .. lit(base) .. "/outside/secret` is absolute"},
          {"hardlink_up", "permission_denied", "entry `h`: hard link target `%.%./%.%./%.%./secret` has a `%.%.`"},
          {"chardev", "permission_denied", "entry `null` is a character device; device files, FIFOs and sockets"},
          {"blockdev", "permission_denied", "entry `sda` is a block device"},
          {"fifo", "permission_denied", "entry `pipe` is a FIFO"},
          {"replace_dir", "already_exists", "entry `d`: a directory of that name exists"},
          {"truncated", "invalid_request", "entry `second.bin`: the archive is damaged or ends early"},
          {"garbage", "invalid_request", "not a tar archive"},
          {"damaged_header", "invalid_request", "the archive is damaged or ends early after entry `caf\u{e9}/" .. ("n"):rep(120) .. "`"},
        }
        for _, c in ipairs(cases) do
          local s = open(conn, profile)
          run(conn, s, "ln -s " .. q(base .. "/outside") .. " out")
          local before = snapshot(base, s.id)
          local w = archive_stream.write(conn, s, tar(c[1] .. (c[1] == "garbage" and ".bin" or ".tar")))
          assert.is_table(w.error, c[1] .. " was accepted")
          assert.equals(c[2], w.error.code, c[1] .. ": " .. w.error.message)
          assert.matches("^write_archive: " .. c[3], w.error.message)
          assert_same_tree(before, snapshot(base, s.id))
          assert.equals("secret", fs.read_file(base .. "/outside/secret"))
        end
      end)

      it("keeps what came before the refused entry", function()
        local conn = start()
        local s = open(conn, profile)
        assert.equals("permission_denied", archive_stream.write(conn, s, tar("absolute.tar")).error.code)
        assert.equals("fine", run(conn, s, "cat ok.txt"))
        assert.equals("invalid_request", archive_stream.write(conn, s, tar("truncated.tar")).error.code)
        assert.equals("1", run(conn, s, "cat first.txt"))
      end)

      it("drops setuid bits and ownership, restores read-only directories, links inside", function()
        local conn = start()
        local s = open(conn, profile)
        local w = archive_stream.write(conn, s, tar("modes.tar"))
        assert.is_table(w.result, cjson.encode(w.error or {}))
        assert.equals(5, w.result.entries)
        local me = run(conn, s, "id -u"):match("%d+")
        assert.equals(("755 %s\n555 %s\n444 %s\n"):format(me, me, me),
          run(conn, s, "stat -c '%a %u' suid ro ro/inner.txt"))
        assert.equals("2 inner", run(conn, s, "printf '%s ' $(stat -c %h hard); cat hard"))
        assert.equals("ro/inner.txt\n", run(conn, s, "readlink rel"))
      end)

      it("reads and writes an empty archive", function()
        local conn = start()
        local s = open(conn, profile)
        local w = conn:call("write_archive", {session = s, data_base64 = "", eof = true})
        assert.same({archive_id = w.result.archive_id, entries = 0, bytes = 0}, w.result)
        run(conn, s, "mkdir nothing")
        local r = archive_stream.read(conn, s, {"nothing"})
        assert.equals(1, r.result.entries)
        assert.is_nil(r.problem)
      end)

      it("refuses entries past the disk cap before writing them: a 10 GB sparse file, a 2 MB one", function()
        local dir = ph.tempdir()
        fs.write_file(dir .. "/profiles.json", cjson.encode{profiles = {
          {name = profile .. "/capped", limits = {disk_bytes = MiB}}}})
        local conn = start{args = {"serve", "--profiles", dir .. "/profiles.json"}}
        local s = ph.open(conn, {profile = {provider = profile, name = "capped"}})
        for _, c in ipairs{{"sparse.tar", "big.img", 10 * 1024 ^ 3}, {"big.tar", "big.bin", 2 * MiB}} do
          local w = archive_stream.write(conn, s, tar(c[1]))
          assert.equals("limit_exceeded", w.error and w.error.code, c[1])
          assert.matches(("entry `%s` %%(a file of %d bytes%%) would take the session past its disk cap of %d bytes")
            :format(lit(c[2]), c[3], MiB), w.error.message)
          assert.matches("profile `" .. profile .. "/capped`", w.error.message)
          assert.equals("absent", run(conn, s, "test -e " .. c[2] .. " && echo present || echo absent"):match("%a+"))
        end
        assert.is_table(archive_stream.write(conn, s, tar("modes.tar")).result, "small archives still fit")
      end)
    end)
  end

  describe("read_archive", function()
    it("names entries relative to cwd and refuses paths outside it or the session", function()
      local conn = start()
      local s = ph.open(conn)
      run(conn, s, "mkdir -p sub/d && printf a > sub/a.txt && printf b > sub/d/b.txt")
      local names = function(data)
        local dir = ph.tempdir()
        fs.write_file(dir .. "/t.tar", data)
        local p = io.popen("tar tf " .. q(dir .. "/t.tar") .. " | sort")
        local out = p:read("a")
        p:close()
        return out
      end
      assert.equals("sub/a.txt\nsub/d/\nsub/d/b.txt\n", names(archive_stream.read(conn, s, {"sub/a.txt", "sub/d"}).data))
      assert.equals("a.txt\n", names(archive_stream.read(conn, s, {"a.txt"}, {cwd = "sub"}).data))
      assert.equals("a.txt\nd/\nd/b.txt\n", names(archive_stream.read(conn, s, {"."}, {cwd = "sub"}).data))
      local r = archive_stream.read(conn, s, {"a.txt"}, {cwd = "sub/d"})
      assert.equals("not_found", r.error.code)
      r = archive_stream.read(conn, s, {"../a.txt"}, {cwd = "sub/d"})
      assert.equals("invalid_request", r.error.code)
      assert.matches("not below the directory the names start from", r.error.message)
      r = archive_stream.read(conn, s, {"/etc/passwd"}, {cwd = "/"})
      assert.equals("permission_denied", r.error.code)
      r = conn:call("read_archive", {session = s, paths = {}})
      assert.equals("invalid_request", r.error.code)
      assert.matches("paths", r.error.message)
    end)

    it("packs links as links and never follows them out", function()
      local conn = start()
      local s = ph.open(conn)
      run(conn, s, "mkdir d && ln -s " .. q(base .. "/outside") .. " d/out && ln -s /etc/passwd d/pw")
      local r = archive_stream.read(conn, s, {"d"})
      assert.equals(3, r.result.entries)
      assert.is_nil(r.data:find("secret", 1, true))
    end)

    it("follows links inside the session with follow_links, and refuses those leading out", function()
      local conn = start()
      local s = ph.open(conn)
      run(conn, s, "mkdir -p out/d && printf top > out/d/f && ln -s d out/dirlink && ln -s d/f out/filelink")
      local r = archive_stream.read(conn, s, {"out/dirlink", "out/filelink"}, {follow_links = true})
      assert.is_table(r.result, cjson.encode(r.error or {}))
      local dir = ph.tempdir()
      fs.write_file(dir .. "/t.tar", r.data)
      sh("cd " .. q(dir) .. " && tar xf t.tar")
      assert.equals("top", fs.read_file(dir .. "/out/filelink"))
      assert.equals("top", fs.read_file(dir .. "/out/dirlink/f"))
      assert.equals("directory", lfs.symlinkattributes(dir .. "/out/dirlink").mode)
      run(conn, s, "ln -s .. out/d/loop")
      r = archive_stream.read(conn, s, {"out"}, {follow_links = true})
      assert.equals("invalid_request", r.error.code)
      assert.matches("too many levels of symbolic links", r.error.message)
      run(conn, s, "rm out/d/loop && ln -s /etc/passwd out/escape && ln -s nothing out/dangling")
      r = archive_stream.read(conn, s, {"out/escape"}, {follow_links = true})
      assert.equals("permission_denied", r.error.code)
      assert.matches("^read_archive: symlink `out/escape` points outside the sandbox or to nothing", r.error.message)
      assert.equals("not_found", archive_stream.read(conn, s, {"out/dangling"}, {follow_links = true}).error.code)
    end)

    it("sends no more than `window` chunks before they are acknowledged", function()
      local conn = start()
      local s = ph.open(conn)
      run(conn, s, "head -c 5000000 /dev/zero > five")
      local got, acked, id = 0, 0, nil
      local req = conn:send("read_archive", {session = s, paths = {"five"}, window = 1}, {
        discard_events = true, on_event = function(ev)
          id = id or ev.archive_id
          if ev.type == "chunk" then got = got + 1 end
        end})
      while not req.done do
        assert.is_true(ph.wait_until(function() return got > acked or req.done end))
        if req.done then break end
        -- a round trip: a provider ignoring the window has its next chunk out by now
        ph.op(conn, s, "stat", {path = "five"})
        assert.equals(acked + 1, got)
        acked = got
        ph.op(conn, s, "read_archive_ack", {archive_id = id, chunks = acked})
      end
      assert.is_table(req.result)
      assert.equals(5, got)
      local bad = ph.op(conn, s, "read_archive_ack", {archive_id = id, chunks = 1})
      assert.equals("invalid_request", bad.error.code)
    end)
  end)

  describe("archives in flight", function()
    it("abort_archive ends a read and a write; the session goes on", function()
      local conn = start()
      local s = ph.open(conn)
      run(conn, s, "head -c 5000000 /dev/zero > five")
      local req = conn:send("read_archive", {session = s, paths = {"five"}, window = 1})
      assert.is_true(ph.wait_until(function() return #req.events >= 2 end))
      local abort = ph.op(conn, s, "abort_archive", {archive_id = req.events[1].archive_id})
      assert.same({}, abort.result)
      conn:wait(req)
      assert.equals("io_error", req.error.code)
      assert.matches("aborted", req.error.message)
      local w = conn:call("write_archive", {session = s, data_base64 = ph.b64(tar("big.tar"):sub(1, 100000))})
      assert.same({}, ph.op(conn, s, "abort_archive", {archive_id = w.result.archive_id}).result)
      local again = ph.op(conn, s, "write_archive", {archive_id = w.result.archive_id, data_base64 = "", eof = true})
      assert.equals("invalid_request", again.error.code)
      assert.equals("invalid_request", ph.op(conn, s, "abort_archive", {archive_id = "a99"}).error.code)
      assert.is_table(archive_stream.write(conn, s, tar("modes.tar")).result)
    end)

    it("a closing session answers its archives with unknown_session; other sessions are served meanwhile", function()
      local conn = start()
      local s, other = ph.open(conn), ph.open(conn)
      run(conn, s, "head -c 5000000 /dev/zero > five")
      local req = conn:send("read_archive", {session = s, paths = {"five"}, window = 1})
      assert.is_true(ph.wait_until(function() return #req.events >= 2 end))
      local w = conn:call("write_archive", {session = s, data_base64 = ph.b64(tar("big.tar"):sub(1, 100000))})
      assert.equals("ok\n", run(conn, other, "echo ok"))
      assert.same({}, conn:call("close", s).result)
      assert.is_true(req.done)
      assert.equals("unknown_session", req.error.code)
      local late = ph.op(conn, s, "write_archive", {archive_id = w.result.archive_id, eof = true})
      assert.equals("unknown_session", late.error.code)
    end)

    it("checks its fields", function()
      local conn = start()
      local s = ph.open(conn)
      local function err(method, params)
        local r = ph.op(conn, s, method, params)
        return r.error and r.error.code, r.error and r.error.message
      end
      local w = conn:call("write_archive", {session = s})
      local id = w.result.archive_id
      assert.equals("invalid_request", err("write_archive", {archive_id = id, path = "x"}))
      assert.equals("invalid_request", err("write_archive", {archive_id = "nope"}))
      assert.equals("invalid_request", err("write_archive", {archive_id = id, data_base64 = "!!"}))
      assert.equals("invalid_request", err("write_archive", {archive_id = id, eof = "yes"}))
      local code, msg = err("write_archive", {archive_id = id, data_base64 = string.rep("A", 24 * MiB)})
      assert.equals("limit_exceeded", code)
      assert.matches("smaller chunks", msg)
      assert.equals("invalid_request", err("read_archive_ack", {archive_id = id, chunks = 1}))
      assert.equals("invalid_request", err("read_archive_ack", {archive_id = "a1"}))
      assert.equals("invalid_request", err("abort_archive", {}))
      assert.same({archive_id = id, entries = 0, bytes = 0},
        ph.op(conn, s, "write_archive", {archive_id = id, eof = true}).result)
    end)
  end)

  it("`smolwf-provider unpack` prints a UTF-8 line when the refused entry's name is not UTF-8", function()
    local dir = base .. "/unpack-raw"
    assert(lfs.mkdir(dir))
    local p = assert(io.popen(q(ph.PROVIDER) .. " unpack " .. q(dir) .. " " .. q(tars .. "/fifo_raw_name.tar")))
    local line = p:read("l")
    p:close()
    ph.rm(dir)
    assert.is_not_nil(utf8.len(line), "not UTF-8: " .. line)
    local out = cjson.decode(line)
    assert.equals("permission_denied", out.error.code)
    assert.matches("entry `pipe\u{fffd}` is a FIFO", out.error.message)
  end)

  it("works for an unprivileged provider too", function()
    if not ph.IS_ROOT then return end
    local conn = ph.start{prefix = ph.AS_NOBODY}
    local s = ph.open(conn)
    local w = archive_stream.write(conn, s, tar("modes.tar"))
    assert.is_table(w.result, cjson.encode(w.error or {}))
    assert.equals("555\n444\n", run(conn, s, "stat -c %a ro ro/inner.txt"))
    local r = archive_stream.read(conn, s, {"."})
    assert.equals(5, r.result.entries)
    assert.equals("permission_denied", archive_stream.write(conn, s, tar("chardev.tar")).error.code)
  end)
end)
