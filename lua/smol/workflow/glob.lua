--[[
Path patterns for a step's `inputs` and `outputs`, matched against paths
relative to a directory ("src/main.c"):

  *      any characters but "/"          ?   one character but "/"
  **     any characters, "/" included    **/ any number of directories, none too
  a path without wildcards names a file, or a directory and all under it

"src/**.c" and "src/**/*.c" both match src/main.c and src/lib/x.c.
The walkers list the files a set of patterns matches, sorted: on this
machine (lfs) and in a sandbox session (list_dir); both skip directories
tagged as caches (CACHEDIR.TAG), as the workspace copy does.
]]
local lfs = require "lfs"

local M = {}

-- Tokens of a pattern: literal strings, "?", "*", "**", "**/".
local function tokens(glob)
  local out, i, literal = {}, 1, {}
  local function flush()
    if #literal > 0 then out[#out + 1] = { lit = table.concat(literal) }; literal = {} end
  end
  while i <= #glob do
    local c = glob:sub(i, i)
    if glob:sub(i, i + 2) == "**/" then flush(); out[#out + 1] = { any_dirs = true }; i = i + 3
    elseif glob:sub(i, i + 1) == "**" then flush(); out[#out + 1] = { any = true }; i = i + 2
    elseif c == "*" then flush(); out[#out + 1] = { star = true }; i = i + 1
    elseif c == "?" then flush(); out[#out + 1] = { one = true }; i = i + 1
    else literal[#literal + 1] = c; i = i + 1 end
  end
  flush()
  return out
end

-- Whether path[at..] matches toks[k..] (backtracking; paths are short).
local function match_from(toks, k, path, at)
  local t = toks[k]
  if not t then return at == #path + 1 end
  if t.lit then
    if path:sub(at, at + #t.lit - 1) ~= t.lit then return false end
    return match_from(toks, k + 1, path, at + #t.lit)
  elseif t.one then
    local c = path:sub(at, at)
    return c ~= "" and c ~= "/" and match_from(toks, k + 1, path, at + 1)
  end
  -- star, any, any_dirs: try every length the token may take.
  local stop = at
  while true do
    if (not t.any_dirs or stop == at or path:sub(stop - 1, stop - 1) == "/")
        and match_from(toks, k + 1, path, stop) then
      return true
    end
    local c = path:sub(stop, stop)
    if c == "" or (t.star and c == "/") then return false end
    stop = stop + 1
  end
end

function M.has_wildcard(glob)
  return glob:find("[*?]") ~= nil
end

--- A function(path) -> bool for the pattern.
function M.compile(glob)
  local toks = tokens(glob)
  return function(path) return match_from(toks, 1, path, 1) end
end

--- The leading directories without wildcards ("src/lib" for "src/lib/**.c"),
--- where a walk for the pattern starts; "" for the top.
function M.static_prefix(glob)
  local dirs = {}
  for part in glob:gmatch("[^/]+") do dirs[#dirs + 1] = part end
  local prefix = {}
  for i = 1, #dirs - 1 do
    if M.has_wildcard(dirs[i]) then break end
    prefix[#prefix + 1] = dirs[i]
  end
  return table.concat(prefix, "/")
end

local function join(a, b)
  if a == "" then return b end
  return a .. "/" .. b
end

-- ===== On this machine ======================================================

local function host_walk(base, rel, out, seen)
  local dir = rel == "" and base or base .. "/" .. rel
  if lfs.attributes(dir .. "/CACHEDIR.TAG", "mode") == "file" then return end
  local names = {}
  for name in lfs.dir(dir) do
    if name ~= "." and name ~= ".." then names[#names + 1] = name end
  end
  for _, name in ipairs(names) do
    local path = join(rel, name)
    local mode = lfs.symlinkattributes(base .. "/" .. path, "mode")
    -- A directory symlink is not followed (it may loop); a file one is hashed as its target.
    if mode == "directory" then host_walk(base, path, out, seen)
    elseif not seen[path] and (mode == "file" or (mode == "link" and lfs.attributes(base .. "/" .. path, "mode") == "file")) then
      seen[path], out[#out + 1] = true, path
    end
  end
end

--[[
The files under `base` the patterns match, as {paths = sorted relative
paths, missing = literal paths that do not exist}.
]]
function M.host_files(base, globs)
  local matched, seen, missing = {}, {}, {}
  for _, glob in ipairs(globs) do
    local found = {}
    if not M.has_wildcard(glob) then
      local mode = lfs.attributes(base .. "/" .. glob, "mode")
      if mode == "directory" then host_walk(base, glob, found, {})
      elseif mode then found[1] = glob
      else missing[#missing + 1] = glob end
    else
      local prefix = M.static_prefix(glob)
      if lfs.attributes(prefix == "" and base or base .. "/" .. prefix, "mode") == "directory" then
        local all, match = {}, M.compile(glob)
        host_walk(base, prefix, all, {})
        for _, p in ipairs(all) do if match(p) then found[#found + 1] = p end end
      end
    end
    for _, p in ipairs(found) do
      if not seen[p] then seen[p], matched[#matched + 1] = true, p end
    end
  end
  table.sort(matched)
  return { paths = matched, missing = missing }
end

-- ===== In a sandbox session =================================================

local function entries_of(listing)
  return listing.entries or listing
end

local function session_walk(session, rel, out)
  local ok, listing = pcall(session.list_dir, session, rel == "" and "." or rel)
  if not ok then return end
  for _, entry in ipairs(entries_of(listing)) do
    local path = join(rel, entry.name)
    if entry.type == "dir" then
      if entry.name ~= ".smolwf" then session_walk(session, path, out) end
    else
      out[#out + 1] = path
    end
  end
end

--[[
What the patterns name in a session: {paths = sorted relative paths (a
literal path as given, file or directory), missing = literal paths that do
not exist}. Patterns with wildcards need the session's fs_extra (list_dir).
]]
function M.session_paths(session, globs)
  local paths, seen, missing = {}, {}, {}
  local function add(p) if not seen[p] then seen[p], paths[#paths + 1] = true, p end end
  for _, glob in ipairs(globs) do
    if not M.has_wildcard(glob) then
      local ok, err = pcall(session.stat, session, glob)
      if ok then add(glob)
      elseif type(err) == "table" and err.code == "not_found" then missing[#missing + 1] = glob
      elseif type(err) == "table" and err.code == "unsupported" then add(glob)  -- copied out or it fails there
      else error(err, 0) end
    else
      local all, match = {}, M.compile(glob)
      session_walk(session, M.static_prefix(glob), all)
      for _, p in ipairs(all) do if match(p) then add(p) end end
    end
  end
  table.sort(paths)
  return { paths = paths, missing = missing }
end

return M
