-- What the conformance kit looks at on this machine, outside the provider:
-- the host workspace it hands to `open`, files a broken provider may have
-- written where it must not, and processes that must be gone after close
-- (found by a unique marker in their command line; a parent pid namespace
-- sees the processes of the sandboxes it contains).
local core = require "smol.core"
local lfs = require "lfs"   -- lua-filesystem, a dependency of busted
local fs = require "smol.fs"

local hostside = {}

-- A fresh random word for names and markers, unique per run.
function hostside.token()
  return string.format("%06x%06x", math.random(0, 0xffffff),
    math.floor(core.now() * 1000) % 0x1000000)
end

-- The file's content, or nil (and why) when it cannot be read: a process's
-- /proc entry vanishes when it exits.
hostside.read = fs.try_read_file
hostside.write = fs.write_file

function hostside.exists(path)
  return lfs.symlinkattributes(path) ~= nil
end

-- All 256 byte values, in order.
function hostside.all_bytes()
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return table.concat(t)
end

-- Runs a short helper command to completion (kill); true on exit 0.
local function run(argv)
  local status
  local proc = core.spawn{file = argv[1], args = argv,
    on_exit = function(code) status = code end}
  if not proc then return false end
  while status == nil do core.run_once() end
  proc:close()
  return status == 0
end

--[[
Makes the host directory sent as workspace_sync.host_path: a few files,
a subdirectory, and symlinks that point out of it (the provider must copy
them as links and refuse to follow them). Returns its path and a table of
the files with their contents.
]]
function hostside.make_workspace()
  local dir = fs.temp_dir("smolwf-conformance")
  local files = {
    ["seed.txt"] = "seed file\n",
    ["sub/inner.txt"] = "inner file\n",
    ["bytes.bin"] = hostside.all_bytes(),
  }
  assert(lfs.mkdir(dir .. "/sub"))
  for name, data in pairs(files) do hostside.write(dir .. "/" .. name, data) end
  assert(lfs.link("/etc/passwd", dir .. "/passwd_link", true))
  assert(lfs.link("/etc", dir .. "/etc_link", true))
  return dir, files
end

--[[
Removes a directory tree without following symlinks; true when all of it
is gone. Synchronous (no helper process, no event loop) and never raises,
so it also works while the run is being torn down after Ctrl-C.
]]
function hostside.remove_tree(path)
  return (pcall(fs.remove_tree, path))
end

-- Processes whose command line contains `marker`: a list of {pid, state}.
-- nil when this machine's /proc cannot be listed.
function hostside.find_procs(marker)
  if not lfs.attributes("/proc/self") then return nil end
  local found = {}
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local cmdline = hostside.read("/proc/" .. name .. "/cmdline") or ""
      if cmdline:find(marker, 1, true) then
        local stat = hostside.read("/proc/" .. name .. "/stat") or ""
        found[#found + 1] = {pid = tonumber(name), state = stat:match("%) (%a)")}
      end
    end
  end
  return found
end

-- KILLs processes a broken provider left behind, so a failed check leaks nothing.
function hostside.kill(list)
  if #list == 0 then return true end
  local argv = {"kill", "-KILL"}
  for _, p in ipairs(list) do argv[#argv + 1] = tostring(p.pid) end
  return run(argv)
end

function hostside.describe_procs(list)
  local parts = {}
  for _, p in ipairs(list) do
    parts[#parts + 1] = string.format("pid %d (state %s)", p.pid, p.state or "?")
  end
  return table.concat(parts, ", ")
end

return hostside
