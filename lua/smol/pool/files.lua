--[[
smol.pool.files: files moved to a session from another session (a step's
outputs, for a step on another provider) or from this machine (an
uploaded workspace).

  files.move(from, paths, to [, opts])  -> {entries = N, bytes = N, via = "archive" | "files"}
  files.upload(dir, to [, opts])        -> {entries = N, bytes = N, via = "archive" | "files"}
      opts.exclude (upload): the workspace's exclude patterns (sandbox.open's,
      gitignore-style); directories tagged as caches are left out too
      opts.via = "files": file by file even where an archive could go

Paths are relative to the sessions' cwd (the workspace) and land at the
same paths in `to`. Where both sessions announce the `archive` extension
the files travel as one tar streamed in chunks (sandbox.copy: the host
holds a few chunks at a time); elsewhere file by file (fs_extra: ranged
reads, appended writes, modes), which any provider with fs_extra serves.
]]

local lfs = require "lfs"
local errors = require "smol.errors"

local files = {}

files.CHUNK = 4 * 1024 * 1024   -- bytes per read and write, file by file

local function has(sb, cap)
  return type(sb.capabilities) == "table" and sb.capabilities[cap] == true
end

local function archive_between(from, to)
  local sandbox = require "smol.sandbox"
  return sandbox.copy ~= nil and has(to, "archive") and (from == nil or has(from, "archive"))
end

local function parent_of(path)
  return path:match("^(.*)/[^/]+$")
end

--[[ File by file ]]

-- Copies one file of `from` to `to` in ranges of files.CHUNK bytes.
local function copy_file(from, to, path, size, mode)
  local offset, first = 0, true
  repeat
    local data, eof = from:read_file(path, {offset = offset, length = files.CHUNK})
    to:write_file(path, data, {append = not first or nil, mode = first and mode or nil})
    offset, first = offset + #data, false
  until eof or #data == 0
  return offset
end

local function copy_tree(from, to, path, st, stats, made)
  if st.type == "dir" then
    if not made[path] then to:create_dir_all(path); made[path] = true end
    stats.entries = stats.entries + 1
    for _, e in ipairs(from:list_dir(path)) do
      local child = path .. "/" .. e.name
      copy_tree(from, to, child, from:stat(child), stats, made)
    end
  elseif st.type == "file" or st.type == "symlink" then
    -- a link travels as what it points to (the protocol makes no links)
    local parent = parent_of(path)
    if parent and not made[parent] then to:create_dir_all(parent); made[parent] = true end
    local mode = st.type == "file" and st.mode and (st.mode & 511) or nil
    stats.bytes = stats.bytes + copy_file(from, to, path, st.size, mode)
    stats.entries = stats.entries + 1
  end
end

local function move_by_files(from, paths, to)
  for _, sb in ipairs{from, to} do
    if not has(sb, "fs_extra") then
      errors.raise{code = "unsupported", op = "move",
        message = "moving files between sessions needs the archive or fs_extra extension, which a session lacks"}
    end
  end
  local stats, made = {entries = 0, bytes = 0, via = "files"}, {}
  for _, path in ipairs(paths) do copy_tree(from, to, path, from:stat(path), stats, made) end
  return stats
end

function files.move(from, paths, to, opts)
  if #paths == 0 then return {entries = 0, bytes = 0, via = "none"} end
  if not (opts and opts.via == "files") and archive_between(from, to) then
    local r = require("smol.sandbox").copy(from, paths, to)
    return {entries = r.entries, bytes = r.bytes, via = "archive"}
  end
  return move_by_files(from, paths, to)
end

--[[ Uploads ]]

--[[
An upload reads the tree through a session of the bundled provider on
this machine (local/default), which takes it in with the workspace rules
(sandbox.open's `exclude` patterns, directories tagged as caches and the
provider's own directories left out; a reflink copy where the filesystem
has one), then moves its entries like any other files.
]]
function files.upload(dir, to, opts)
  opts = opts or {}
  if lfs.attributes(dir, "mode") ~= "directory" then
    errors.raise{code = "not_found", op = "upload", path = dir,
      message = ("the workspace to upload `%s` is not a directory"):format(dir)}
  end
  local sandbox = require "smol.sandbox"
  local here = sandbox.open{profile = "local/default", workspace = {path = dir, exclude = opts.exclude}}
  local ok, r = pcall(function()
    local names = {}
    for _, e in ipairs(here:list_dir(".")) do names[#names + 1] = e.name end
    return files.move(here, names, to, opts)
  end)
  pcall(here.close, here)
  if not ok then error(r, 0) end
  return r
end

return files
