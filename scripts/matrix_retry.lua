-- A matrix of test shards with retries: each shard is flaky (its first
-- attempt exits 75, "temporary failure"), and the retry predicate re-runs
-- only on that code, with exponential backoff.
--
--   smolwf run scripts/matrix_retry.lua
local wf = require "smol.workflow"

local TEMPFAIL = 75

-- The first attempt of each shard leaves a marker in the sandbox and fails.
local function flaky_shard(ctx)
  local marker = ("tried-%s-%s"):format(ctx.matrix.os, ctx.matrix.shard)
  ctx:sh(("if [ -e %s ]; then echo 'shard %s on %s passed'; else touch %s; echo 'flaky!' >&2; exit %d; fi")
    :format(marker, ctx.matrix.shard, ctx.matrix.os, marker, TEMPFAIL))
  return ctx.attempt
end

return wf.define {
  name = "matrix-retry",
  sandbox = {},
  jobs = 4,
  steps = {
    { name = "prepare", run = function(ctx) ctx:sh("echo preparing") end },
    { name = "test", needs = "prepare",
      matrix = { os = { "debian", "alpine" }, shard = { 1, 2, 3 } },
      retry = { attempts = 3, backoff = 0.2,
                when = function(failure) return failure.exit_code == TEMPFAIL end },
      run = flaky_shard },
    { name = "report", needs = "test", always = true, run = function(ctx)
        local results, ids, attempts = ctx.inputs.test or {}, {}, 0
        for id in pairs(results) do ids[#ids + 1] = id end
        table.sort(ids)
        for _, id in ipairs(ids) do
          ctx.log(id, "passed on attempt", results[id])
          attempts = attempts + results[id]
        end
        ctx.log("total attempts:", attempts)
      end },
  },
}
