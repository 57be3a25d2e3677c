--[[
A module loaded at the first use of one of its fields:

  local step_cache = require("smol.lazy")("smol.workflow.step_cache")

Parsing a module's source is most of what requiring it costs (the step
cache's modules: ~8M instructions, ~3 ms, paid by every run although most
workflows never cache a step), so what a run only sometimes needs waits
until it does.
]]
return function(name)
  return setmetatable({}, {__index = function(proxy, key)
    local module = require(name)
    setmetatable(proxy, {__index = module})
    return module[key]
  end})
end
