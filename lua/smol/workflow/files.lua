-- Host-side files of a run: the report directory and artifacts copied out
-- of a sandbox session into it.
local lfs = require "lfs"

local M = {}

-- mkdir -p; raises naming the path when a component cannot be made.
function M.mkdir_p(path)
  local prefix = path:sub(1, 1) == "/" and "/" or ""
  for part in path:gmatch("[^/]+") do
    prefix = prefix .. part
    if lfs.attributes(prefix, "mode") ~= "directory" then
      local ok, err = lfs.mkdir(prefix)
      if not ok and lfs.attributes(prefix, "mode") ~= "directory" then
        error(("cannot create directory '%s': %s"):format(prefix, tostring(err)), 0)
      end
    end
    prefix = prefix .. "/"
  end
  return path
end

function M.write(path, bytes)
  local f, err = io.open(path, "wb")
  if not f then error(("cannot write '%s': %s"):format(path, err), 0) end
  f:write(bytes)
  f:close()
end

-- A name safe to use below the report directory: relative, no '..'.
function M.check_relative(name)
  if name == "" or name:sub(1, 1) == "/" then
    error(("artifact name '%s' must be a non-empty relative path"):format(name), 0)
  end
  for part in name:gmatch("[^/]+") do
    if part == ".." then error(("artifact name '%s' must not contain '..'"):format(name), 0) end
  end
  return name
end

-- File names for instance ids: matrix values may hold any character.
function M.safe_name(id)
  return (id:gsub("[^%w%-_.,=%[%]]", "_"))
end

function M.basename(path)
  local trimmed = path:gsub("/+$", "")
  return trimmed:match("([^/]+)$") or "artifact"
end

local function entry_type(session, path)
  if not (session.capabilities and session.capabilities.fs_extra) then return "file" end
  return session:stat(path).type
end

local function entries_of(listing)
  return listing.entries or listing
end

local CHUNK_BYTES = 4 * 1024 * 1024

-- Big files move in ranged reads where the session has them (fs_extra), so
-- neither side holds a whole large artifact in memory.
local function copy_file(session, src, dest)
  if not (session.capabilities and session.capabilities.fs_extra) then
    return M.write(dest, session:read_file(src))
  end
  local f, err = io.open(dest, "wb")
  if not f then error(("cannot write '%s': %s"):format(dest, err), 0) end
  local ok, copy_err = pcall(function()
    local offset, bytes, eof = 0, nil, false
    repeat
      bytes, eof = session:read_file(src, { offset = offset, length = CHUNK_BYTES })
      f:write(bytes)
      offset = offset + #bytes
    until eof or #bytes == 0
  end)
  f:close()
  if not ok then error(copy_err, 0) end
end

-- Copies a file or a directory tree from the session to the host path `dest`.
-- Symlinks and special files are skipped: they cannot be copied faithfully.
function M.copy_out(session, src, dest)
  local kind = entry_type(session, src)
  if kind == "dir" then
    M.mkdir_p(dest)
    for _, entry in ipairs(entries_of(session:list_dir(src))) do
      M.copy_out(session, src .. "/" .. entry.name, dest .. "/" .. entry.name)
    end
  elseif kind == "file" then
    copy_file(session, src, dest)
  end
end

return M
