-- A step's binary output through `smolwf run`'s plain view (stdout not a
-- terminal), as a user piping a run to a file has it (prints figures; not
-- a timed test).
--
--   smolwf bench/binary_output_bench.lua [MB] [ROUNDS]    (default 100 MB, 3 rounds)
--
-- One step `cat`s MB of random bytes (invalid UTF-8 every few bytes, an
-- escape byte every 256: each shown line is repaired and cleaned), then
-- the same amount of build-log text; `smolwf run ... > FILE` runs as a
-- child each time. Prints the median wall time of each and their ratio.
-- Target: linear in MB, binary within a few times text.
local core = require "smol.core"
local fs = require "smol.fs"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local MB = tonumber(arg[1]) or 100
local ROUNDS = tonumber(arg[2]) or 3

local function sh(command)
  assert(os.execute(command), "failed: " .. command)
end

local dir = fs.temp_dir("smolwf-binary-bench")
local bytes = MB * 1000 * 1000
sh(("head -c %d /dev/urandom > %s/random.bin"):format(bytes, dir))
sh(('yes "cc -O2 -Wall -Wextra -c src/module_name.c -o build/module_name.o" 2>/dev/null | head -c %d > %s/text.txt')
  :format(bytes, dir))
fs.write_file(dir .. "/wf.lua", [[
local file = arg[1]
return require("smol.workflow").define{name = "binary-bench",
  sandbox = {profile = "local/default", workspace = ""},
  steps = {{name = "spew", run = function(ctx) ctx:exec{"cat", file, capture = false} end}}}
]])

-- Seconds one `smolwf run` of a step printing `file` takes, its stdout to a file.
local function timed(file)
  local t0 = core.now()
  sh(("cd %s && '%s' run --report-dir %s/report wf.lua %s/%s > %s/out 2>&1")
    :format(dir, core.exe_path(), dir, dir, file, dir))
  local t = core.now() - t0
  fs.remove_tree(dir .. "/report")
  return t
end

timed("text.txt")  -- page cache and provider binary warm
local binary, text = {}, {}
for r = 1, ROUNDS do
  binary[r], text[r] = timed("random.bin"), timed("text.txt")
end
fs.remove_tree(dir)
print(("binary output bench: a step printing %d MB, plain view to a file, %d rounds (medians)"):format(MB, ROUNDS))
print(("  random bytes, wall                       %8.3f s  (%.0f MB/s)"):format(median(binary), MB / median(binary)))
print(("  build-log text, wall                     %8.3f s  (%.0f MB/s)"):format(median(text), MB / median(text)))
print(("  ratio binary / text                      %8.3f x"):format(median(binary) / median(text)))
