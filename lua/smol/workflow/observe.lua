-- Calling the run's observers (see the observer interface in the contract).
local core = require "smol.core"

local M = {}

-- Calls method on every observer, in order; a failing observer is reported
-- on stderr once per method and does not stop the run.
function M.notify(S, method, ...)
  if S.finalized and not S.finalizing then return end
  for _, obs in ipairs(S.observers) do
    local fn = obs[method]
    if fn then
      local ok, err = pcall(fn, obs, S.run, ...)
      if not ok and not S.observer_errors[method] then
        S.observer_errors[method] = true
        S.warn(("observer error in %s: %s"):format(method, tostring(err)))
      end
    end
  end
end

-- Records an instance's final status and tells the observers. The error
-- message is shown everywhere: the run's secrets are masked in it.
function M.finish(S, inst, status, err)
  if S.finalized and not S.finalizing then return end
  inst.status = status
  inst.error = S.masker and type(err) == "string" and S.masker:text(err) or err
  inst.ended_at = core.time()
  inst.duration = inst.started_at and (inst.ended_at - inst.started_at) or 0
  M.notify(S, "step_finished", inst)
end

return M
