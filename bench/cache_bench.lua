-- Step cache benchmark (prints figures; not a timed test).
--
--   smolwf bench/cache_bench.lua [STEPS] [ROUNDS]     (default 200 steps, 5 rounds)
--
-- A workflow of STEPS independent steps, each with an input file and an
-- output file (`cp` in a local session), run in rounds of three, side by
-- side: the first run (cold cache, every step runs and is stored), a
-- fully cached re-run (every step a hit: key computed, outputs restored
-- into the session, value restored), and a workflow of STEPS uncached
-- no-op steps. Prints the medians, the ratio cached / first, and the
-- per-hit overhead: (cached - no-op) / STEPS. Target: under 2 ms per hit.
local wf = require "smol.workflow"
local core = require "smol.core"
local fs = require "smol.fs"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local STEPS = tonumber(arg[1]) or 200
local ROUNDS = tonumber(arg[2]) or 5

local function project()
  local dir = fs.temp_dir("smolwf-cache-bench")
  fs.mkdir_p(dir .. "/work/in")
  for i = 1, STEPS do fs.write_file(("%s/work/in/%d.txt"):format(dir, i), ("input %d\n"):format(i):rep(20)) end
  return dir
end

local function cached_steps()
  local steps = {}
  for i = 1, STEPS do
    steps[i] = { name = "s" .. i, inputs = { "in/" .. i .. ".txt" }, outputs = { "out/" .. i .. ".txt" },
      run = function(ctx)
        ctx:sh(("mkdir -p out && cp in/%d.txt out/%d.txt"):format(i, i))
        return { i = i, path = "out/" .. i .. ".txt" }
      end }
  end
  return steps
end

local function noop_steps()
  local steps = {}
  for i = 1, STEPS do steps[i] = { name = "n" .. i, run = function() end } end
  return steps
end

-- One run (reports and logs written, as `smolwf run` does); its seconds.
local function timed(dir, steps, cache_dir)
  local def = wf.define { name = "cache-bench", jobs = 8,
    sandbox = { profile = "local/default", workspace = dir .. "/work" }, steps = steps }
  local report_dir = fs.temp_dir("smolwf-cache-bench-report")
  local t0 = core.now()
  local run = wf.run(def, { report_dir = report_dir, cache_dir = cache_dir })
  local t = core.now() - t0
  fs.remove_tree(report_dir)
  assert(run.result == "success", "bench run failed")
  return t, run
end

local function count_hits(run)
  local n = 0
  for _, inst in ipairs(run.instances) do if inst.cache and inst.cache.status == "hit" then n = n + 1 end end
  return n
end

local dir = project()
local first, cached, noop = {}, {}, {}
for r = 1, ROUNDS do
  local cache_dir = dir .. "/cache" .. r
  first[r] = timed(dir, cached_steps(), cache_dir)
  local t, run = timed(dir, cached_steps(), cache_dir)
  assert(count_hits(run) == STEPS, "not every step was a hit")
  cached[r] = t
  noop[r] = timed(dir, noop_steps(), cache_dir)
end
fs.remove_tree(dir)

local m_first, m_cached, m_noop = median(first), median(cached), median(noop)
print(("cache bench: %d steps, %d rounds (medians), jobs 8, local/default"):format(STEPS, ROUNDS))
print(("  first run (every step runs, stored)      %8.1f ms"):format(m_first * 1000))
print(("  cached re-run (every step a hit)         %8.1f ms"):format(m_cached * 1000))
print(("  %d uncached no-op steps                  %8.1f ms"):format(STEPS, m_noop * 1000))
print(("  cached / first                           %8.3f x"):format(m_cached / m_first))
print(("  per-hit overhead over a no-op step       %8.3f ms (target < 2)"):format((m_cached - m_noop) / STEPS * 1000))
