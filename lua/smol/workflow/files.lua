-- Host-side files of a run: names below the report directory and artifacts
-- copied out of a sandbox session into it.
local lfs = require "lfs"
local fs = require "smol.fs"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"

local M = {}

-- A name safe to use below the report directory: relative, no '..'.
function M.check_relative(name)
  if name == "" or name:sub(1, 1) == "/" then
    errors.raise{code = "invalid_request", message = ("artifact name '%s' must be a non-empty relative path"):format(name)}
  end
  for part in name:gmatch("[^/]+") do
    if part == ".." then errors.raise{code = "invalid_request", message = ("artifact name '%s' must not contain '..'"):format(name)} end
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
  local f, err, errno = io.open(dest, "wb")
  if not f then errors.raise{code = core.error_code(errno), op = "fs.write", path = dest, message = err} end
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

local function permissions_text(mode)
  local out = {}
  for shift = 8, 0, -1 do
    out[#out + 1] = (mode >> shift) & 1 == 1 and ("rwx"):sub(3 - shift % 3, 3 - shift % 3) or "-"
  end
  return table.concat(out)
end

-- Gives the copied files their sandbox permission bits (an executable stays
-- executable), where they differ from what the copy made.
local function apply_modes(modes)
  for path, mode in pairs(modes) do
    if lfs.attributes(path, "permissions") ~= permissions_text(mode) then
      local ok, message, errname = core.chmod(path, mode)
      if not ok then
        errors.raise{code = core.error_code(errname), op = "chmod", path = path,
          message = ("cannot set the mode %o: %s"):format(mode, message)}
      end
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
    errors.raise{code = "io_error", message = ("symlink `%s`: too many levels of symbolic links (a loop?)"):format(src)}
  end
  local ok, listing = pcall(session.list_dir, session, src)
  state.depth = state.depth + 1
  if ok then
    copy_dir(session, src, dest, listing, state)
  elseif error_code(listing) == "not_a_directory" then
    copy_file(session, src, dest)
  elseif error_code(listing) == "permission_denied" or error_code(listing) == "not_found" then
    errors.raise{code = error_code(listing), message = ("symlink `%s` points outside the sandbox or to nothing (%s); it cannot be saved")
      :format(src, error_code(listing))}
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
    errors.raise{code = "unsupported", message = ("`%s` is a special file (%s); it cannot be saved"):format(src, tostring(info.type))}
  end
end

--[[
Where the session announces `archive` (and the bundled provider is at
hand to extract on this side): one read_archive of src, links inside the
sandbox followed as above, into a tar next to the staging path, extracted
there by `smolwf-provider unpack` with the provider's own rules (nothing
outside the staging path, no device files, no setuid bits). Returns the
path of what was extracted, or nil when this way is not available.
]]
local function unpack_into(dir, tar)
  local done, out = task.event(), {}
  local exe = core.bundled_provider()
  local proc = assert(core.spawn{file = exe, args = {exe, "unpack", dir, tar}, stdout = "lines",
    on_stdout = function(line) if line then out[#out + 1] = line end end,
    on_exit = function(code) done:set(code) end})
  local code = done:wait()
  proc:close()
  local ok, reply = pcall(require("cjson").decode, out[1] or "")
  if code == 0 then return end
  local e = ok and type(reply) == "table" and reply.error or {}
  errors.raise{code = type(e.code) == "string" and e.code or "io_error", op = "unpack", path = dir,
    message = ("cannot extract the artifact: %s"):format(tostring(e.message or out[1]))}
end

local function copy_out_archive(session, src, staging)
  if not (session.capabilities and session.capabilities.archive and session.read_archive and core.bundled_provider()) then
    return nil
  end
  local dir, base = src:gsub("/+$", ""):match("^(.*)/([^/]+)$")
  if not dir then dir, base = ".", src:gsub("/+$", "") end
  if dir == "" then dir = "/" end
  local whole = base == "." or base == ""
  fs.mkdir_p(staging)
  local tar = staging .. ".tar"
  local ok, err = pcall(session.read_archive, session, whole and {"."} or {base},
    {cwd = whole and src or dir, follow_links = true, to = tar})
  if ok then ok, err = pcall(unpack_into, staging, tar) end
  os.remove(tar)
  if ok then return whole and staging or staging .. "/" .. base end
  local link = errors.is(err) and tostring(err.message):match("^read_archive: symlink `(.-)` points outside")
  if link then
    errors.raise{code = err.code, message = ("symlink `%s` points outside the sandbox or to nothing (%s); it cannot be saved")
      :format(link, err.code)}
  end
  error(err, 0)
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
    local saved = copy_out_archive(session, src, staging)
    if not saved then
      copy_entry(session, src, staging, state)
      apply_modes(state.modes)
    end
    fs.remove_tree(dest)
    local moved, why = os.rename(saved or staging, dest)
    if not moved then errors.raise{code = "io_error", message = ("cannot move the artifact into '%s': %s"):format(dest, tostring(why))} end
  end)
  if ok then
    pcall(fs.remove_tree, staging)   -- what held an archive's extraction, when it went that way
    return dest
  end
  -- Best effort: the copy's own error is the one to report.
  pcall(fs.remove_tree, staging)
  for i = #made, 1, -1 do lfs.rmdir(made[i]) end  -- only empty ones go
  error(err, 0)
end

return M
