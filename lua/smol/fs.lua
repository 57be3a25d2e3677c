-- smol.fs: helpers for this machine's own file system (not a sandbox's):
-- whole-file reads and writes, mkdir -p, rm -r and temp directories, for
-- the workflow engine, the testing kit, the conformance kit and the specs.
-- A failure raises a smol.errors value (code from the errno: not_found,
-- permission_denied, ...; op "fs.write" etc.) that reads as
--   cannot write `/tmp/x/report.json`: not_found: No such file or directory
local lfs = require "lfs"   -- lua-filesystem, a dependency of busted
local core = require "smol.core"
local errors = require "smol.errors"

local fs = {}

-- io.open and os.remove put the path in front of the reason; lfs does not.
-- The path is named once, by fail().
local function reason_of(path, message)
  local prefix = path .. ": "
  message = tostring(message)
  if message:sub(1, #prefix) == prefix then return message:sub(#prefix + 1) end
  return message
end

-- errno: io.open's or lfs's third result, a number (or nil).
local function error_of(op, path, message, errno)
  return errors.new{code = core.error_code(errno), op = op, path = path,
    message = reason_of(path, message)}
end

local function fail(op, path, message, errno)
  error(error_of(op, path, message, errno), 0)
end

-- The content, or nil and the error value.
local function read_all(path)
  local f, err, errno = io.open(path, "rb")
  if not f then return nil, error_of("fs.read", path, err, errno) end
  -- io.open succeeds on a directory; the read is what fails.
  local content, read_err, read_errno = f:read("a")
  f:close()
  if not content then return nil, error_of("fs.read", path, read_err, read_errno) end
  return content
end

--- The whole content of the file at path, or nil and a message when it
-- cannot be read, and the error value as a third result.
function fs.try_read_file(path)
  local content, err = read_all(path)
  if not content then return nil, tostring(err), err end
  return content
end

--- The whole content of the file at path; raises when it cannot be read.
function fs.read_file(path)
  local content, err = read_all(path)
  if not content then error(err, 0) end
  return content
end

--- Writes data as the whole content of the file at path (replacing it).
function fs.write_file(path, data)
  local f, err, errno = io.open(path, "wb")
  if not f then fail("fs.write", path, err, errno) end
  local written, write_err, write_errno = f:write(data)
  local closed, close_err, close_errno = f:close()
  if not written or not closed then fail("fs.write", path, write_err or close_err, write_errno or close_errno) end
end

--- mkdir -p: makes path and its missing parents. Returns the directories
-- it created, in order (so a caller can undo exactly those); raises naming
-- the component that could not be made.
function fs.mkdir_p(path)
  local prefix, created = path:sub(1, 1) == "/" and "/" or "", {}
  for part in path:gmatch("[^/]+") do
    prefix = prefix .. part
    if lfs.attributes(prefix, "mode") ~= "directory" then
      local ok, err, errno = lfs.mkdir(prefix)
      if ok then created[#created + 1] = prefix
      -- Another writer may have made it meanwhile; only a missing directory fails.
      elseif lfs.attributes(prefix, "mode") ~= "directory" then fail("fs.mkdir", prefix, err, errno) end
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
    local ok, err, errno = lfs.rmdir(path)
    if not ok then fail("fs.remove", path, err, errno) end
  elseif mode then
    local ok, err, errno = os.remove(path)
    if not ok then fail("fs.remove", path, err, errno) end
  end
  return true
end

--- A new private directory $TMPDIR/NAME-XXXXXX (/tmp without TMPDIR).
-- The caller removes it (fs.remove_tree).
function fs.temp_dir(name)
  local template = (os.getenv("TMPDIR") or "/tmp") .. "/" .. name .. "-XXXXXX"
  local dir, err, errname = core.mkdtemp(template)
  if not dir then
    errors.raise{code = core.error_code(errname), op = "fs.temp_dir", path = template,
      message = reason_of(template, err)}
  end
  return dir
end

return fs
