-- Host-side files of a run: names below the report directory and artifacts
-- copied out of a sandbox session into it.
local lfs = require "lfs"
local fs = require "smol.fs"

local M = {}

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
-- A leading dot would hide the file (and ".." name the parent): dots that
-- start the name become underscores.
function M.safe_name(id)
  local name = id:gsub("[^%w%-_.,=%[%]]", "_")
  return (name:gsub("^%.+", function(dots) return ("_"):rep(#dots) end))
end

function M.basename(path)
  local trimmed = path:gsub("/+$", "")
  return trimmed:match("([^/]+)$") or "artifact"
end

local function has_fs_extra(session)
  return session.capabilities and session.capabilities.fs_extra
end

local function entries_of(listing)
  return listing.entries or listing
end

local function error_code(err)
  return type(err) == "table" and err.code or nil
end

local CHUNK_BYTES = 4 * 1024 * 1024

-- Big files move in ranged reads where the session has them (fs_extra), so
-- neither side holds a whole large artifact in memory.
local function copy_file(session, src, dest)
  if not has_fs_extra(session) then
    return fs.write_file(dest, session:read_file(src))
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

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function permissions_text(mode)
  local out = {}
  for shift = 8, 0, -1 do
    out[#out + 1] = (mode >> shift) & 1 == 1 and ("rwx"):sub(3 - shift % 3, 3 - shift % 3) or "-"
  end
  return table.concat(out)
end

local CHMOD_BATCH = 64

-- Gives the copied files their sandbox permission bits (an executable stays
-- executable). Lua has no chmod: one `chmod` per mode and batch of paths.
local function apply_modes(modes)
  local by_mode = {}
  for path, mode in pairs(modes) do
    if lfs.attributes(path, "permissions") ~= permissions_text(mode) then
      by_mode[mode] = by_mode[mode] or {}
      table.insert(by_mode[mode], shell_quote(path))
    end
  end
  for mode, paths in pairs(by_mode) do
    for i = 1, #paths, CHMOD_BATCH do
      local cmd = ("chmod %o -- %s"):format(mode, table.concat(paths, " ", i, math.min(#paths, i + CHMOD_BATCH - 1)))
      if not os.execute(cmd) then error(("cannot set the mode %o of '%s'"):format(mode, paths[i]), 0) end
    end
  end
end

-- A symlink is followed when what it points to stays inside the sandbox
-- (the provider refuses the rest); loops end after this many links deep.
local MAX_LINK_DEPTH = 8

local copy_entry

local function copy_dir(session, src, dest, listing, state)
  fs.mkdir_p(dest)
  for _, entry in ipairs(entries_of(listing)) do
    copy_entry(session, src .. "/" .. entry.name, dest .. "/" .. entry.name, state)
  end
end

-- Copies what the link points to: a directory (listed through the link)
-- or a file (read through it). A link out of the sandbox or to nothing
-- fails the save, naming the link: silently dropping it would lose data.
local function copy_link(session, src, dest, state)
  if state.depth >= MAX_LINK_DEPTH then
    error(("symlink `%s`: too many levels of symbolic links (a loop?)"):format(src), 0)
  end
  local ok, listing = pcall(session.list_dir, session, src)
  state.depth = state.depth + 1
  if ok then
    copy_dir(session, src, dest, listing, state)
  elseif error_code(listing) == "not_a_directory" then
    copy_file(session, src, dest)
  elseif error_code(listing) == "permission_denied" or error_code(listing) == "not_found" then
    error(("symlink `%s` points outside the sandbox or to nothing (%s); it cannot be saved")
      :format(src, error_code(listing)), 0)
  else
    error(listing, 0)
  end
  state.depth = state.depth - 1
end

function copy_entry(session, src, dest, state)
  if not has_fs_extra(session) then return copy_file(session, src, dest) end
  local info = session:stat(src)
  if info.type == "dir" then
    copy_dir(session, src, dest, session:list_dir(src), state)
  elseif info.type == "file" then
    copy_file(session, src, dest)
    if math.type(info.mode) == "integer" then state.modes[dest] = info.mode & 4095 end
  elseif info.type == "symlink" then
    copy_link(session, src, dest, state)
  else
    error(("`%s` is a special file (%s); it cannot be saved"):format(src, tostring(info.type)), 0)
  end
end

-- Copies a file or a directory tree from the session to the host path
-- `dest`, all or nothing: into a hidden staging path first, renamed into
-- place once complete; on failure nothing is left (no partial tree, no
-- directory made for it) and the error is raised.
function M.copy_out(session, src, dest)
  local parent, base = dest:match("^(.*)/([^/]*)$")
  local made = fs.mkdir_p(parent)
  local staging = parent .. "/.saving-" .. base
  fs.remove_tree(staging)
  local state = { depth = 0, modes = {} }
  local ok, err = pcall(function()
    copy_entry(session, src, staging, state)
    apply_modes(state.modes)
    fs.remove_tree(dest)
    local moved, why = os.rename(staging, dest)
    if not moved then error(("cannot move the artifact into '%s': %s"):format(dest, tostring(why)), 0) end
  end)
  if ok then return dest end
  -- Best effort: the copy's own error is the one to report.
  pcall(fs.remove_tree, staging)
  for i = #made, 1, -1 do lfs.rmdir(made[i]) end  -- only empty ones go
  error(err, 0)
end

return M
