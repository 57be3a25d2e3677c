-- Reflink copies (host/provider/workspace.c): on a file system that shares
-- extents (xfs here, on a loop device: root only, with Debian's xfsprogs),
-- a copied workspace shares its files' data with the host tree (FICLONE)
-- and says so (`reflink`); writes to the copy still never reach the host.
local ph = dofile("spec/fixtures/provider_helpers.lua")
local fs = require "smol.fs"

local function can_mount_xfs()
  return ph.IS_ROOT and os.execute("command -v mkfs.xfs >/dev/null && command -v losetup >/dev/null")
end

describe("workspace copies on xfs", function()
  local dir, mnt

  before_each(function()
    if not can_mount_xfs() then return end
    dir = ph.tempdir()   -- ph.stop_all unmounts mnt and removes it
    mnt = dir .. "/mnt"
    assert(os.execute(("truncate -s 512M %s/xfs.img && mkfs.xfs -q %s/xfs.img && mkdir %s && mount -o loop %s/xfs.img %s")
      :format(dir, dir, mnt, dir, mnt)))
  end)

  after_each(function()
    ph.stop_all()
    mnt, dir = nil, nil
  end)

  it("share the host files' extents, and say reflink", function()
    if not mnt then pending("needs root, mkfs.xfs and a loop device") return end
    assert(os.execute(("mkdir -p %s/run %s/tree/sub && head -c 1048576 /dev/urandom > %s/tree/sub/big"):format(mnt, mnt, mnt)))
    fs.write_file(mnt .. "/tree/a.txt", "host\n")
    local conn = ph.start({env_extra = {XDG_RUNTIME_DIR = mnt .. "/run"}})
    local s = ph.open(conn, {workspace_sync = {host_path = mnt .. "/tree"}})
    assert.equals("reflink", s.capabilities.workspace)
    assert.equals(2, s.workspace.files)
    local extents = io.popen("filefrag -v " .. s.cwd .. "/sub/big"):read("a")
    assert.matches("shared", extents)
    ph.exec(conn, s, {"sh", "-c", "echo changed > a.txt; echo more >> sub/big"})
    assert.equals("host\n", fs.read_file(mnt .. "/tree/a.txt"))
    assert.equals(1048576, #fs.read_file(mnt .. "/tree/sub/big"))
  end)
end)
