--[[
A workflow's secrets: `secrets = {TOKEN = {env = "TOKEN"}, KEY = {param = "key"}}`
takes each value from the host's environment or from a parameter (--param
key=...), when the run starts; one that says `optional = true` may be
absent (its variable is then unset, ctx.secrets.NAME nil). Every command of every step gets them as
environment variables (TOKEN=..., KEY=...), ctx.secrets has them by name,
and the run's masker (smol.workflow.mask) hides them in everything that
leaves the host. A value shorter than mask.MIN_BYTES is refused: masking
it would hide every occurrence of those bytes.
]]
local mask = require "smol.workflow.mask"

local M = {}

local Setup = { __tostring = function(e) return e.message end }

local function refuse(fmt, ...)
  error(setmetatable({ code = "setup", message = fmt:format(...) }, Setup), 0)
end

-- The secret's value; nil for an optional one that is not given.
local function value_of(name, spec, params)
  if spec.env then
    local v = os.getenv(spec.env)
    if v == nil and not spec.optional then
      refuse("secret %s: the environment variable %s is not set", name, spec.env)
    end
    return v
  end
  local v = params[spec.param]
  if v == nil and not spec.optional then
    refuse("secret %s: no parameter %s (give --param %s=...)", name, spec.param, spec.param)
  end
  return v ~= nil and tostring(v) or nil
end

--[[
The secrets of `def` with `params` (the run's merged parameters):
{values = {NAME = value}, params = {param names that are secrets = true},
masker}. Raises a setup error naming the secret when one is missing or
too short.
]]
function M.resolve(def, params)
  local values, secret_params, list = {}, {}, {}
  local names = {}
  for name in pairs(def.secrets or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local spec = def.secrets[name]
    local v = value_of(name, spec, params or {})
    if v == nil then goto next end
    if #v < mask.MIN_BYTES then
      refuse("secret %s is %d byte%s long: secrets shorter than %d bytes are refused"
        .. " (masking them would hide every occurrence of those bytes)", name, #v, #v == 1 and "" or "s", mask.MIN_BYTES)
    end
    values[name], list[#list + 1] = v, v
    if spec.param then secret_params[spec.param] = true end
    ::next::
  end
  return { values = values, params = secret_params, masker = mask.new(list) }
end

--- params as reports may show them: the values of secret parameters masked.
function M.shown_params(params, secrets)
  local out = {}
  for k, v in pairs(params) do out[k] = secrets.params[k] and mask.REPLACEMENT or v end
  return out
end

return M
