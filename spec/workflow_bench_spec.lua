-- The cache, hashing and masking benchmarks still run: each, with tiny
-- sizes, prints every figure it promises. Nothing is timed or compared
-- here (the figures are for a quiet machine, see the README).
local sandbox = require "smol.sandbox"
local core = require "smol.core"

local function bench(script, ...)
  local r = sandbox.host {}:exec { core.exe_path(), script, ... }
  assert(r.exit_code == 0, r.stdout .. r.stderr)
  return r.stdout
end

local function assert_figures(out, labels)
  for _, label in ipairs(labels) do
    assert.truthy(out:find("\n  " .. label:gsub("%p", "%%%0") .. "[^\n]-%d+%.?%d* ") , ("no figure for %q in:\n%s"):format(label, out))
  end
end

describe("the workflow benchmarks", function()
  it("cache_bench prints the first run, the cached re-run, the ratio and the per-hit overhead", function()
    assert_figures(bench("bench/cache_bench.lua", "4", "1"), { "first run (every step runs, stored)",
      "cached re-run (every step a hit)", "4 uncached no-op steps", "cached / first", "per-hit overhead over a no-op step" })
  end)

  it("hash_bench prints both throughputs and their ratio", function()
    assert_figures(bench("bench/hash_bench.lua", "1", "2", "1"), { "core.hash_files (OpenSSL SHA-256)",
      "sha256sum (coreutils)", "ratio ours / sha256sum" })
  end)

  it("mask_bench prints both runs, the ratios and the masker alone", function()
    assert_figures(bench("bench/mask_bench.lua", "1", "1"), { "no secret, wall", "5 secrets, wall",
      "ratio 5 secrets / none, wall", "ratio 5 secrets / none, host CPU", "the masker alone" })
  end)
end)
