-- The cost of masking secrets in a step's output (prints figures; not a
-- timed test).
--
--   smolwf bench/mask_bench.lua [MB] [ROUNDS]     (default 100 MB, 5 rounds)
--
-- One step writing MB of build-log lines through a local session, its
-- output going through the engine as in `smolwf run` (the live line, the
-- log files), in alternating rounds: with no secret, and with 5 secrets
-- (each masked with its base64 at 3 alignments, JSON and XML forms: 5 to 9
-- patterns per secret), which the output never contains (the common case).
-- Prints the median wall time of each and the median of the per-round
-- ratios, then the same for the host's own CPU time (os.clock: what the
-- masking itself costs, whatever else the machine is doing), and the
-- masker alone over the same bytes in 35 KB chunks (what the provider
-- sends), next to the no-secret run.
-- Target: masking costs under 10% more.
local wf = require "smol.workflow"
local mask = require "smol.workflow.mask"
local core = require "smol.core"
local fs = require "smol.fs"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local MB = tonumber(arg[1]) or 100
local ROUNDS = tonumber(arg[2]) or 5

local SECRETS = { "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ", "AKIAIOSFODNN7EXAMPLE",
  "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "xoxb-2048-4096-8192-s3cr3tT0k3n", "correct horse battery staple" }

local COMMAND = ('yes "cc -O2 -Wall -Wextra -c src/module_name.c -o build/module_name.o" | head -c %d'):format(MB * 1000 * 1000)

local function timed(with_secrets)
  local secrets, env = {}, {}
  if with_secrets then
    for i, v in ipairs(SECRETS) do
      secrets["S" .. i] = { param = "s" .. i }
      env["s" .. i] = v
    end
  end
  local def = wf.define { name = "mask-bench", sandbox = { profile = "local/default", workspace = "" }, secrets = secrets,
    steps = { { name = "flood", run = function(ctx) ctx:exec { "sh", "-c", COMMAND, capture = false } end } } }
  local report_dir = fs.temp_dir("smolwf-mask-bench")
  local t0, c0 = core.now(), os.clock()
  local run = wf.run(def, { report_dir = report_dir, params = env })
  local t, c = core.now() - t0, os.clock() - c0
  fs.remove_tree(report_dir)
  assert(run.result == "success", "bench run failed: " .. tostring(run.instances[1].error))
  return t, c
end

timed(false)  -- provider started, caches warm
local walls, cpus = { plain = {}, masked = {}, ratio = {} }, { plain = {}, masked = {}, ratio = {} }
for r = 1, ROUNDS do
  walls.plain[r], cpus.plain[r] = timed(false)
  walls.masked[r], cpus.masked[r] = timed(true)
  walls.ratio[r], cpus.ratio[r] = walls.masked[r] / walls.plain[r], cpus.masked[r] / cpus.plain[r]
  if os.getenv("BENCH_VERBOSE") then print(("  round %d: wall %.3f / %.3f s, host CPU %.3f / %.3f s"):format(r, walls.plain[r], walls.masked[r], cpus.plain[r], cpus.masked[r])) end
end
print(("mask bench: a step writing %d MB, %d rounds (medians), local/default, logs written"):format(MB, ROUNDS))
print(("  no secret, wall                          %8.3f s  (%.0f MB/s)"):format(median(walls.plain), MB / median(walls.plain)))
print(("  5 secrets, wall                          %8.3f s  (%.0f MB/s)"):format(median(walls.masked), MB / median(walls.masked)))
print(("  ratio 5 secrets / none, wall             %8.3f x (target < 1.10)"):format(median(walls.ratio)))
print(("  no secret, host CPU                      %8.3f s"):format(median(cpus.plain)))
print(("  5 secrets, host CPU                      %8.3f s"):format(median(cpus.masked)))
print(("  ratio 5 secrets / none, host CPU         %8.3f x (target < 1.10)"):format(median(cpus.ratio)))

local LINE = "cc -O2 -Wall -Wextra -c src/module_name.c -o build/module_name.o\n"
local chunk = LINE:rep(35000 // #LINE)
local masker = mask.new(SECRETS)
local stream, t0 = masker:stream(), os.clock()
for _ = 1, math.ceil(MB * 1e6 / #chunk) do stream:feed(chunk) end
stream:flush()
local alone = os.clock() - t0
print(("  the masker alone, %d patterns, %d MB      %8.3f s  (%.0f MB/s, %.1f%% of the no-secret run)")
  :format(#masker.forms, MB, alone, MB / alone, alone / median(walls.plain) * 100))
