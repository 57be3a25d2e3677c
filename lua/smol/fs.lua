-- smol.fs: helpers for this machine's own file system (not a sandbox's):
-- whole-file reads and writes, mkdir -p, rm -r and temp directories, for
-- the workflow engine, the testing kit, the conformance kit and the specs.
-- A failure raises a message naming the path:
--   cannot write `/tmp/x/report.json`: No such file or directory
local lfs = require "lfs"   -- lua-filesystem, a dependency of busted
local core = require "smol.core"

local fs = {}

-- io.open and os.remove put the path in front of the reason; lfs does not.
-- The path is named once, by fail().
local function reason_of(path, message)
  local prefix = path .. ": "
  message = tostring(message)
  if message:sub(1, #prefix) == prefix then return message:sub(#prefix + 1) end
  return message
end

local function fail(what, path, message)
  error(("cannot %s `%s`: %s"):format(what, path, reason_of(path, message)), 0)
end

--- The whole content of the file at path, or nil and a message when it
-- cannot be read (missing, a directory, a /proc entry that vanished): for
-- callers to whom a missing file is an answer, not an error.
function fs.try_read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, ("cannot read `%s`: %s"):format(path, reason_of(path, err)) end
  -- io.open succeeds on a directory; the read is what fails.
  local content, read_err = f:read("a")
  f:close()
  if not content then return nil, ("cannot read `%s`: %s"):format(path, reason_of(path, read_err)) end
  return content
end

--- The whole content of the file at path; raises when it cannot be read.
function fs.read_file(path)
  local content, err = fs.try_read_file(path)
  if not content then error(err, 0) end
  return content
end

--- Writes data as the whole content of the file at path (replacing it).
function fs.write_file(path, data)
  local f, err = io.open(path, "wb")
  if not f then fail("write", path, err) end
  local written, write_err = f:write(data)
  local closed, close_err = f:close()
  if not written or not closed then fail("write", path, write_err or close_err) end
end

--- mkdir -p: makes path and its missing parents. Returns the directories
-- it created, in order (so a caller can undo exactly those); raises naming
-- the component that could not be made.
function fs.mkdir_p(path)
  local prefix, created = path:sub(1, 1) == "/" and "/" or "", {}
  for part in path:gmatch("[^/]+") do
    prefix = prefix .. part
    if lfs.attributes(prefix, "mode") ~= "directory" then
      local ok, err = lfs.mkdir(prefix)
      if ok then created[#created + 1] = prefix
      -- Another writer may have made it meanwhile; only a missing directory fails.
      elseif lfs.attributes(prefix, "mode") ~= "directory" then fail("create directory", prefix, err) end
    end
    prefix = prefix .. "/"
  end
  return created
end

--- rm -r: removes path and everything below it, never following a symlink
-- (a link is removed, not what it points to). A missing path is fine.
-- Returns true; raises naming the first entry it could not remove.
function fs.remove_tree(path)
  local mode = lfs.symlinkattributes(path, "mode")
  if mode == "directory" then
    for name in lfs.dir(path) do
      if name ~= "." and name ~= ".." then fs.remove_tree(path .. "/" .. name) end
    end
    local ok, err = lfs.rmdir(path)
    if not ok then fail("remove", path, err) end
  elseif mode then
    local ok, err = os.remove(path)
    if not ok then fail("remove", path, err) end
  end
  return true
end

--- A new private directory $TMPDIR/NAME-XXXXXX (/tmp without TMPDIR).
-- The caller removes it (fs.remove_tree).
function fs.temp_dir(name)
  local template = (os.getenv("TMPDIR") or "/tmp") .. "/" .. name .. "-XXXXXX"
  local dir, err = core.mkdtemp(template)
  if not dir then fail("create temp directory", template, err) end
  return dir
end

return fs
