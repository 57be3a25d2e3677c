--[[
smol.pool.files: files moved to a session from another session (a step's
outputs, for a step on another provider) or from this machine (an
uploaded workspace).

  files.move(from, paths, to [, opts])  -> {entries = N, bytes = N, via = "archive" | "files"}
  files.upload(dir, to [, opts])        -> {entries = N, bytes = N, via = "archive" | "files"}
      opts.exclude (upload): tar --exclude patterns; directories tagged as
      caches (CACHEDIR.TAG) are left out, as the provider's workspace copy does
      opts.via = "files": file by file even where an archive could go

Paths are relative to the sessions' cwd (the workspace) and land at the
same paths in `to`. Where both sessions announce the `archive` extension
the files travel as one tar streamed in chunks (sandbox.copy; an upload
is packed by tar into a temp file first, then streamed from it, so the
host holds at most a chunk of it in memory); elsewhere file by file
(fs_extra: ranged reads, appended writes, modes), which any provider
with fs_extra serves.
]]

local core = require "smol.core"
local fs = require "smol.fs"
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

local CACHE_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"

local function is_cache_dir(dir)
  local f = io.open(dir .. "/CACHEDIR.TAG", "rb")
  if not f then return false end
  local head = f:read(#CACHE_SIGNATURE)
  f:close()
  return head == CACHE_SIGNATURE
end

local PERMISSION_BITS = {256, 128, 64, 32, 16, 8, 4, 2, 1}

local function mode_of(path)
  local perms, mode = lfs.attributes(path, "permissions") or "", 0
  for i = 1, 9 do if perms:sub(i, i) ~= "-" then mode = mode | PERMISSION_BITS[i] end end
  return mode
end

-- Writes a file of this machine into the session in pieces; returns its size.
local function put_file(full, to, path)
  local f, err = io.open(full, "rb")
  if not f then errors.raise{code = "io_error", op = "fs.read", path = full, message = tostring(err)} end
  local extra, size, first = has(to, "fs_extra"), 0, true
  repeat
    local data = f:read(extra and files.CHUNK or "a") or ""
    if first or #data > 0 then
      local ok, e = pcall(to.write_file, to, path, data,
        extra and {append = not first or nil, mode = first and mode_of(full) or nil} or nil)
      if not ok then f:close(); error(e, 0) end
    end
    size, first = size + #data, false
  until not extra or #data < files.CHUNK
  f:close()
  return size
end

local function upload_tree(dir, rel, to, stats)
  local here = rel == "" and dir or dir .. "/" .. rel
  for name in lfs.dir(here) do
    if name ~= "." and name ~= ".." then
      local path = rel == "" and name or rel .. "/" .. name
      local full = dir .. "/" .. path
      local mode = lfs.symlinkattributes(full, "mode")
      if mode == "directory" and not is_cache_dir(full) then
        to:create_dir_all(path)
        stats.entries = stats.entries + 1
        upload_tree(dir, path, to, stats)
      elseif lfs.attributes(full, "mode") == "file" then   -- a link: what it points to
        stats.entries, stats.bytes = stats.entries + 1, stats.bytes + put_file(full, to, path)
      end
    end
  end
end

-- Runs tar to its end; raises naming it and what it said when it fails.
local function run_tar(argv)
  local task = require "smol.task"
  local err, done = {}, task.event()
  local proc, msg = core.spawn{file = argv[1], args = argv, stdout = "ignore", stderr = "lines",
    on_stderr = function(line) if line then err[#err + 1] = line end end,
    on_exit = function(code) done:set(code) end}
  if not proc then errors.raise{code = "not_found", op = "upload", path = "tar", message = "cannot run tar: " .. tostring(msg)} end
  local code = done:wait()
  proc:close()
  if code ~= 0 then
    errors.raise{code = "io_error", op = "upload", message = ("`tar` failed with status %d: %s"):format(code, table.concat(err, "; "))}
  end
end

local function upload_by_archive(dir, to, opts)
  local tmp = fs.temp_dir("smolwf-upload")
  local tar = tmp .. "/workspace.tar"
  local ok, r = pcall(function()
    local argv = {"tar", "--create", "--file=" .. tar, "--exclude-caches-all", "--format=pax"}
    for _, pattern in ipairs(opts.exclude or {}) do argv[#argv + 1] = "--exclude=" .. pattern end
    argv[#argv + 1] = "--directory=" .. dir
    argv[#argv + 1] = "."
    run_tar(argv)
    local f = assert(io.open(tar, "rb"))
    local result = to:write_archive(function() return f:read(files.CHUNK) end)
    f:close()
    return result
  end)
  fs.remove_tree(tmp)
  if not ok then error(r, 0) end
  return {entries = r.entries, bytes = r.bytes, via = "archive"}
end

function files.upload(dir, to, opts)
  opts = opts or {}
  if lfs.attributes(dir, "mode") ~= "directory" then
    errors.raise{code = "not_found", op = "upload", path = dir,
      message = ("the workspace to upload `%s` is not a directory"):format(dir)}
  end
  if opts.via ~= "files" and archive_between(nil, to) then return upload_by_archive(dir, to, opts) end
  if opts.exclude and #opts.exclude > 0 then
    errors.raise{code = "unsupported", op = "upload", path = dir,
      message = "excludes need a session with the archive extension"}
  end
  local stats = {entries = 0, bytes = 0, via = "files"}
  upload_tree(dir, "", to, stats)
  return stats
end

return files
