--[[
The default report root, .smolwf: one directory per run under
.smolwf/runs/<timestamp>, the last N of them kept (--keep-runs, default
20), and the cache directory tag (https://bford.info/cachedir/) that makes
backup and copy tools (the provider's workspace copy too) skip it, so
earlier runs and the step cache do not nest into later sessions.
]]
local lfs = require "lfs"
local fs = require "smol.fs"

local M = {}

M.ROOT = ".smolwf"
M.RUNS = M.ROOT .. "/runs"
M.DEFAULT_KEEP = 20

local SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55\n"

--- Tags `dir` as a cache directory (made if need be); `what` says whose.
function M.tag(dir, what)
  local path = dir .. "/CACHEDIR.TAG"
  if lfs.attributes(path, "mode") then return end
  fs.mkdir_p(dir)
  fs.write_file(path, SIGNATURE .. "# This file is a cache directory tag created by smolwf (" .. what .. ").\n"
    .. "# For information about cache directory tags, see https://bford.info/cachedir/\n")
end

--- A new run directory's path, .smolwf/runs/YYYYmmdd-HHMMSS[-N] (not made yet).
function M.new_dir()
  M.tag(M.ROOT, "workflow reports")
  local base = M.RUNS .. "/" .. os.date("%Y%m%d-%H%M%S")
  local dir, n = base, 1
  while lfs.attributes(dir) do n = n + 1; dir = base .. "-" .. n end
  return dir
end

local RUN_NAME = "^%d%d%d%d%d%d%d%d%-%d%d%d%d%d%d"

-- The run directories, oldest first (their names sort by time).
local function run_dirs()
  local names = {}
  if lfs.attributes(M.RUNS, "mode") ~= "directory" then return names end
  for name in lfs.dir(M.RUNS) do
    if name:find(RUN_NAME) and lfs.attributes(M.RUNS .. "/" .. name, "mode") == "directory" then
      names[#names + 1] = name
    end
  end
  table.sort(names, function(a, b)
    local ta, na = a:match("^(%d+%-%d+)%-?(%d*)$")
    local tb, nb = b:match("^(%d+%-%d+)%-?(%d*)$")
    if ta ~= tb or not ta then return a < b end
    return (tonumber(na) or 1) < (tonumber(nb) or 1)
  end)
  return names
end

--- Removes the oldest runs so that `keep` remain; never a path in
--- `protect` (the run being written, the one it resumes). Returns how many.
function M.prune(keep, protect)
  local names, removed = run_dirs(), 0
  local spared = {}
  for _, p in ipairs(protect or {}) do spared[(tostring(p):gsub("/+$", ""))] = true end
  for i = 1, #names - keep do
    local dir = M.RUNS .. "/" .. names[i]
    if not spared[dir] then fs.remove_tree(dir); removed = removed + 1 end
  end
  return removed
end

return M
