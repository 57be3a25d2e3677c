-- Hashing throughput of step-cache inputs (prints figures; not a timed test).
--
--   smolwf bench/hash_bench.lua [MIB_PER_FILE] [FILES] [ROUNDS]   (default 64 MiB x 8, 5 rounds)
--
-- Writes FILES random files, reads them once (so both sides read from the
-- page cache), then in alternating rounds hashes them all with
-- core.hash_files (OpenSSL SHA-256 on libuv's thread pool, what the step
-- cache uses) and with coreutils' `sha256sum FILES...` (one process), and
-- checks both agree. Prints the median MB/s of each and their ratio.
-- Target: at least as fast as sha256sum.
local core = require "smol.core"
local fs = require "smol.fs"
local task = require "smol.task"
local sandbox = require "smol.sandbox"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local MIB = tonumber(arg[1]) or 64
local FILES = tonumber(arg[2]) or 8
local ROUNDS = tonumber(arg[3]) or 5

local dir = fs.temp_dir("smolwf-hash-bench")
local paths = {}
local host = sandbox.host {}
for i = 1, FILES do
  paths[i] = ("%s/f%d.bin"):format(dir, i)
  assert(host:exec { "sh", "-c", ('head -c %d /dev/urandom > "%s"'):format(MIB * 1024 * 1024, paths[i]) }.exit_code == 0)
end

local function ours()
  local done = task.event()
  core.hash_files(paths, function(d) done:set(d) end)
  return done:wait()
end

local function theirs()
  local argv = { "sha256sum" }
  for i, p in ipairs(paths) do argv[i + 1] = p end
  local r = host:exec(argv)
  assert(r.exit_code == 0, r.stderr)
  local out = {}
  for digest in r.stdout:gmatch("(%x+)  [^\n]*\n") do out[#out + 1] = digest end
  return out
end

local function timed(fn)
  local t0 = core.now()
  local v = fn()
  return core.now() - t0, v
end

theirs()  -- into the page cache
local mine, coreutils = {}, {}
for r = 1, ROUNDS do
  local t1, d1 = timed(ours)
  local t2, d2 = timed(theirs)
  for i = 1, FILES do assert(d1[i] == d2[i], "digests differ for " .. paths[i]) end
  mine[r], coreutils[r] = t1, t2
end
fs.remove_tree(dir)

local mb = MIB * FILES * 1024 * 1024 / 1e6
local ours_rate, theirs_rate = mb / median(mine), mb / median(coreutils)
print(("hash bench: %d files of %d MiB (%.0f MB), %d rounds (medians), page cache warm"):format(FILES, MIB, mb, ROUNDS))
print(("  core.hash_files (OpenSSL SHA-256)        %8.0f MB/s"):format(ours_rate))
print(("  sha256sum (coreutils)                    %8.0f MB/s"):format(theirs_rate))
print(("  ratio ours / sha256sum                   %8.2f x (target >= 1)"):format(ours_rate / theirs_rate))
