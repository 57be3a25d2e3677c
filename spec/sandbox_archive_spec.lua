-- smol.archive: sb:write_archive, sb:read_archive, sb:archive_writer and sandbox.copy
-- against the bundled provider (local and bwrap sessions on one provider, so a copy
-- between them reads and writes through the same connection).
-- Runs inside the host: /path/to/smolwf /usr/bin/busted --ignore-lua spec/sandbox_archive_spec.lua
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local fs = require "smol.fs"
local h = dofile("spec/fixtures/helpers.lua")

local function sh(sb, script)
  local r = sb:exec{"sh", "-c", script}
  assert(r.ok, script .. ": " .. r.stderr)
  return r.stdout
end

local TREE = "mkdir -p out/d && head -c 2500000 /dev/urandom > out/d/big && printf hi > out/x"
  .. " && chmod 751 out/x && ln -s d/big out/l && mkdir out/empty"
local LISTING = "cd out && find . -printf '%y %m %s %p %l\\n' | sort && cksum d/big x"

describe("smol.archive", function()
  local handles
  before_each(function() handles = core.open_handles() end)

  after_each(function()
    sandbox.shutdown()
    h.cleanup()
    assert.is_true(h.handles_back_to(handles), "uv handles left open")
  end)

  -- An empty workspace each: the checkout (the default) holds other specs' temp files, which come and go.
  local function open(profile)
    return sandbox.open{profile = profile, workspace = h.tempdir()}
  end

  local function both()
    return open("local/default"), open("bwrap/default")
  end

  it("copies a tree between sessions of one provider, unchanged", function()
    local a, b = both()
    sh(a, TREE)
    local r = sandbox.copy(a, {"out"}, b, {path = "into"})
    assert.same({entries = 6, bytes = r.bytes}, r)
    assert.is_true(r.bytes > 2500000)
    assert.equals(sh(a, LISTING), sh(b, "cd into && " .. LISTING))
  end)

  it("copies inside tasks too, two at once", function()
    local a, b = both()
    sh(a, TREE)
    local results = {}
    local tasks = {}
    for i = 1, 2 do
      tasks[i] = task.spawn(function() results[i] = sandbox.copy(a, "out", b, {path = "t" .. i}) end)
    end
    for _, t in ipairs(tasks) do t:join() end
    assert.equals(6, results[1].entries)
    assert.equals(sh(b, "cd t1 && " .. LISTING), sh(b, "cd t2 && " .. LISTING))
  end)

  it("reads into memory, a callback or a host file, and writes from a string or a reader", function()
    local a, b = both()
    sh(a, TREE)
    local whole = a:read_archive({"out/x", "out/d"}, {})
    assert.equals(3, whole.entries)
    assert.equals(whole.bytes, #whole.data)
    local chunks = {}
    local r = a:read_archive("out", {to = function(c) chunks[#chunks + 1] = c end})
    assert.is_nil(r.data)
    assert.equals(r.bytes, #table.concat(chunks))
    assert.is_true(#chunks >= 3)
    local file = h.tempdir() .. "/out.tar"
    a:read_archive({"."}, {cwd = "out/d", to = file})
    assert.equals(3, b:write_archive(whole.data, {path = "from-string"}).entries)
    local i = 0
    local w = b:write_archive(function() i = i + 1; return chunks[i] end, {path = "from-reader"})
    assert.equals(6, w.entries)
    assert.equals(sh(a, LISTING), sh(b, "cd from-reader && " .. LISTING))
    assert.equals(1, b:write_archive(fs.read_file(file), {path = "from-file"}).entries)
    assert.equals(sh(a, "cksum < out/d/big"), sh(b, "cksum < from-file/big"))
  end)

  it("raises the provider's refusal as an error value naming the entry; the session goes on", function()
    local a = open("local/default")
    sh(a, "ln -s /etc outside")
    local tar = a:read_archive("outside").data
    local b = open("bwrap/default")
    local err = h.catch(b.write_archive, b, tar, {path = "in"})
    assert.is_true(errors.is(err, "permission_denied"), tostring(err))
    assert.equals("write_archive", err.op)
    assert.matches("^failed to extract an archive into sandbox directory `in`: permission_denied: write_archive: "
      .. "entry `outside`: symlink to `/etc` points outside the target directory", tostring(err))
    err = h.catch(b.write_archive, b, "not a tar")
    assert.is_true(errors.is(err, "invalid_request"))
    sh(a, "printf fine > fine")
    assert.equals(1, b:write_archive(a:read_archive("fine").data, {path = "in"}).entries)
    assert.equals("fine", sh(b, "cat in/fine"))
  end)

  it("a failing callback or reader aborts the archive, and the error is the caller's", function()
    local a, b = both()
    sh(a, TREE)
    local err = h.catch(a.read_archive, a, "out", {to = function() error("disk full here", 0) end})
    assert.equals("disk full here", err)
    err = h.catch(b.write_archive, b, function() error("source broke", 0) end)
    assert.equals("source broke", err)
    local tar, n = a:read_archive("out").data, 0
    err = h.catch(b.write_archive, b, function()
      n = n + 1
      if n == 1 then return tar:sub(1, 700000) end
      error("late", 0)
    end)
    assert.equals("late", err)
    -- nothing is left in flight: both sessions serve new archives at once
    assert.equals(6, sandbox.copy(a, "out", b, {path = "after"}).entries)
  end)

  it("raises a protocol error for a chunk that is not base64 and an event it does not know", function()
    local bad = sandbox.open{program = {core.exe_path(), "provider", h.fixture("archive_bad_chunks.lua")}}
    local err = h.catch(bad.read_archive, bad, "bad_base64")
    assert.is_true(errors.is(err, "protocol"), tostring(err))
    assert.matches("read_archive chunk: data_base64 is invalid base64", err.message)
    err = h.catch(bad.read_archive, bad, "unknown_event")
    assert.matches("unknown read_archive event type `surprise`", err.message)
    bad:close()
  end)

  it("refuses misuse at the caller's line, and sessions without the extension", function()
    local a = open("local/default")
    local line = debug.getinfo(1, "l").currentline + 1
    local err = h.catch(function() a:write_archive(42) end)
    assert.matches("sandbox_archive_spec%.lua:" .. line .. ": bad argument #1 to 'write_archive'", err)
    assert.matches("non%-empty list of paths", h.catch(function() a:read_archive({}) end))
    assert.matches("`to` must be a function or a file path", h.catch(function() a:read_archive("x", {to = 5}) end))
    local seed = sandbox.open{program = h.fixture("seed_provider.lua"), workspace = h.tempdir()}
    err = h.catch(seed.read_archive, seed, "x")
    assert.is_true(errors.is(err, "unsupported"), tostring(err))
    assert.matches('"archive" capability', err.message)
    assert.is_true(errors.is(h.catch(sandbox.copy, a, "x", seed), "unsupported"))
    seed:close()
  end)
end)
