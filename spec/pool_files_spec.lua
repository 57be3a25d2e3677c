-- Files moved between sessions of different providers, and a tree of this
-- machine uploaded into a session (smol.pool.files): through the archive
-- extension where both sessions announce it, file by file otherwise.
local core = require "smol.core"
local sandbox = require "smol.sandbox"
local files = require "smol.pool.files"
local fs = require "smol.fs"
local h = dofile("spec/fixtures/helpers.lua")

local PROVIDER = core.bundled_provider()

local function sh(sb, script)
  local r = sb:exec{"sh", "-c", script}
  assert(r.exit_code == 0, r.stderr)
  return r.stdout
end

-- A tree with nested directories, an executable, a file bigger than a chunk, a link.
local MAKE_TREE = "mkdir -p build/sub/deep && echo hi > build/sub/deep/x"
  .. " && head -c 9000000 /dev/urandom > build/big && printf '#!/bin/sh\\necho ran\\n' > build/app"
  .. " && chmod 755 build/app && ln -s sub/deep/x build/link && echo other > notmoved"
local CHECK_TREE = "./build/app; cat build/sub/deep/x build/link; md5sum build/big | cut -c1-32;"
  .. " stat -c %a build/app; test -e notmoved && echo notmoved; true"

describe("smol.pool.files", function()
  local pool, a, b
  before_each(function()
    pool = sandbox.pool{programs = {PROVIDER, PROVIDER}}
    a = pool:open_on(pool:member(1), {profile = "local/default", workspace = ""})
    b = pool:open_on(pool:member(2), {profile = "auto/default", workspace = ""})
  end)
  after_each(function()
    pool:close()
    h.cleanup()
  end)

  for _, via in ipairs{"archive", "files"} do
    it("moves a tree to a session on another provider unchanged (" .. via .. ")", function()
      sh(a, MAKE_TREE)
      local r = files.move(a, {"build"}, b, {via = via})
      assert.equal(via, r.via)
      local want = "ran\nhi\nhi\n" .. sh(a, "md5sum build/big | cut -c1-32") .. "755\n"
      assert.equal(want, sh(b, CHECK_TREE))
      assert.is_true(r.bytes >= 9000000)
    end)
  end

  it("moves single files into directories that do not exist yet", function()
    sh(a, "mkdir -p out/x && echo one > out/x/1.txt && echo two > top.txt")
    files.move(a, {"out/x/1.txt", "top.txt"}, b)
    assert.equal("one\ntwo\n", sh(b, "cat out/x/1.txt top.txt"))
  end)

  it("names a path that is not there", function()
    local e = h.catch(files.move, a, {"missing/file"}, b)
    assert.equal("not_found", e.code)
    assert.matches("missing/file", tostring(e), 1, true)
  end)

  it("uploads a tree of this machine, leaving out tagged caches and the workspace's excludes", function()
    local dir = h.tempdir()
    fs.mkdir_p(dir .. "/src/lib")
    fs.mkdir_p(dir .. "/.cache/x")
    fs.mkdir_p(dir .. "/skip")
    fs.write_file(dir .. "/src/lib/a.c", "int a;\n")
    fs.write_file(dir .. "/src/lib/a.o", "object\n")
    fs.write_file(dir .. "/skip/s", "s\n")
    fs.write_file(dir .. "/.cache/CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n")
    fs.write_file(dir .. "/.cache/x/junk", "junk\n")
    for _, via in ipairs{"archive", "files"} do
      local target = pool:open_on(pool:member(2), {profile = "auto/default"})
      local r = files.upload(dir, target, {exclude = {"/skip", "*.o"}, via = via})
      assert.equal(via, r.via)
      assert.equal("./src\n./src/lib\n./src/lib/a.c\n", sh(target, "find . -mindepth 1 | sort"))
    end
  end)

  it("uploads a workspace at open: workspace = {path = DIR, upload = true}", function()
    local sb = pool:open{profile = "bwrap/default", workspace = {path = "spec/fixtures/greeter", upload = true}}
    assert.equal(fs.read_file("spec/fixtures/greeter/greeter.c"), sb:read_file("greeter.c"))
    local e = h.catch(function()
      local s = pool:open{workspace = {path = h.tempdir() .. "/nope", upload = true}}
      return s
    end)
    assert.equal("not_found", e.code)
    assert.matches("the workspace to upload `.*/nope` is not a directory", e.message)
    assert.matches("pool_files_spec%.lua:%d+: pool: open: workspace.mode does not go with upload",
      h.catch(function() local s = pool:open{workspace = {path = ".", upload = true, mode = "ro"}}; return s end))
  end)
end)
