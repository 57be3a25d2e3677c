--[[
Moving an output between two sessions with the archive extension
(sandbox.copy: read_archive from one session, write_archive into the
other, through this host), side by side with `tar c | tar x` through a
pipe on the same files; prints figures, passes or fails nothing:

  smolwf bench/archive_bench.lua [BYTES] [ROUNDS] [FILES]

BYTES (default 1 GiB) of incompressible data in FILES (default 16) files
are made once in a local/default session; each round copies them into a
fresh directory of a second session both ways, alternating which goes
first; the first round warms the page cache and is not counted. Prints
the median MB/s of each, their ratio, and the peak RSS (VmHWM) of this
host and of the provider: neither holds the archive whole.
]]
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local bytes = math.tointeger(tonumber(arg[1] or "")) or 1024 * 1024 * 1024
local rounds = math.tointeger(tonumber(arg[2] or "")) or 5
local files = math.tointeger(tonumber(arg[3] or "")) or 16

local function vm_hwm_mib(pid)
  local f = assert(io.open("/proc/" .. (pid or "self") .. "/status"))
  local kib = f:read("a"):match("VmHWM:%s*(%d+)")
  f:close()
  return tonumber(kib) / 1024
end

local function sh(sb, script)
  local r = sb:exec{"sh", "-c", script}
  assert(r.ok, script .. ": " .. r.stderr)
  return r.stdout
end

local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local ws = assert(core.mkdtemp("/tmp/smolwf-archive-bench-XXXXXX"))
local from = sandbox.open{profile = "local/default", workspace = ws}
local to = sandbox.open{profile = "local/default", workspace = ws}
local per_file = bytes // files
sh(from, ("mkdir out && for i in $(seq %d); do head -c %d /dev/urandom > out/f$i; done"):format(files, per_file))
local total = per_file * files

local function by_archive(dir)
  local r = sandbox.copy(from, {"out"}, to, {path = dir})
  assert(r.entries == files + 1, "entries: " .. tostring(r.entries))
end

-- Local sessions' cwds are host paths: the same files, the same destination disk.
local function by_tar(dir)
  assert(os.execute(("mkdir %s && tar cf - -C %s out | tar xf - -C %s"):format(
    quote(to.cwd .. "/" .. dir), quote(from.cwd), quote(to.cwd .. "/" .. dir))))
end

local function timed(fn, dir)
  local t0 = core.now()
  fn(dir)
  local secs = core.now() - t0
  assert(sh(to, "du -sb " .. quote(dir) .. "/out | cut -f1") + 0 >= total, dir .. " is short")
  sh(to, "rm -rf " .. quote(dir))
  return total / secs / 1e6
end

local archive_mbs, tar_mbs = {}, {}
for round = 0, rounds do
  local first_archive = round % 2 == 0
  local a, t
  if first_archive then a, t = timed(by_archive, "a"), timed(by_tar, "t")
  else t, a = timed(by_tar, "t"), timed(by_archive, "a") end
  if round > 0 then archive_mbs[#archive_mbs + 1], tar_mbs[#tar_mbs + 1] = a, t end
end

local provider_pid = (from.connection and from:connection() or sandbox.connections()[1]).pid
print(("%d MB in %d files, %d rounds (after one warm-up), median:"):format(total // 1000000, files, rounds))
print(("  sandbox.copy (read_archive | write_archive), MB/s  %.0f"):format(median(archive_mbs)))
print(("  tar c | tar x through a pipe, MB/s              %.0f"):format(median(tar_mbs)))
print(("  ratio, tar / archive                            %.2f"):format(median(tar_mbs) / median(archive_mbs)))
print(("  host peak RSS (VmHWM), MiB                      %.1f"):format(vm_hwm_mib()))
print(("  provider peak RSS (VmHWM), MiB                  %.1f"):format(vm_hwm_mib(provider_pid)))
from:close()
to:close()
sandbox.shutdown()
os.execute("rm -rf " .. quote(ws))
