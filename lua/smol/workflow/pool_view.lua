-- How the progress views show a run's pool of providers (smol.pool): a
-- line of the providers with their busy slots, a lost provider, and
-- where a step runs.
local text = require "smol.workflow.text"

local M = {}

local function name(p)
  return p.node or ("provider " .. p.index)
end

-- How the views name each provider, by index: its node, with its index
-- in front where a node runs more than one ("1:box").
local function shown_names(providers)
  local seen, names = {}, {}
  for _, p in ipairs(providers) do seen[name(p)] = (seen[name(p)] or 0) + 1 end
  for _, p in ipairs(providers) do
    names[p.index] = seen[name(p)] > 1 and (p.index .. ":" .. name(p)) or name(p)
  end
  return names
end

-- "pool: n1 2/2 · n2 lost · n3 1/2" (busy/slots each).
function M.line(providers)
  local parts, names = {}, shown_names(providers)
  for _, p in ipairs(providers) do
    local who = names[p.index]
    parts[#parts + 1] = p.alive and ("%s %d/%d"):format(who, p.busy, p.slots) or (who .. " lost")
  end
  return "pool: " .. table.concat(parts, " · ")
end

-- "pool: 3 providers: 1 n1 (2 slots), 2 n2 (2 slots), 3 n3 (2 slots)".
function M.started(providers)
  local parts = {}
  for _, p in ipairs(providers) do
    parts[#parts + 1] = ("%d %s (%d slot%s)"):format(p.index, name(p), p.slots, p.slots == 1 and "" or "s")
  end
  return ("pool: %d provider%s: %s"):format(#providers, #providers == 1 and "" or "s", table.concat(parts, ", "))
end

function M.lost(provider)
  return "pool: " .. text.terminal_line(tostring(provider.lost or (name(provider) .. " lost")))
end

-- "on provider 2 (n2)".
function M.placed(placement)
  return ("on provider %d (%s)"):format(placement.provider, placement.node or "?")
end

-- "@n2" (where the step runs), after its id; pool: the run's (run.pool).
function M.tag(inst, pool)
  local where = inst.placement
  if not where then return nil end
  local names = pool and pool.providers and shown_names(pool.providers) or {}
  return "@" .. tostring(names[where.provider] or where.node or where.provider)
end

-- After the run: "pool: 3 providers on n1, n2, n3", then a line per provider lost.
function M.summary(providers)
  local names, lost = {}, {}
  for _, p in ipairs(providers) do
    names[#names + 1] = name(p)
    if not p.alive then lost[#lost + 1] = "\n  lost: " .. text.terminal_line(tostring(p.lost or name(p))) end
  end
  return ("pool: %d provider%s on %s%s"):format(#providers, #providers == 1 and "" or "s",
    table.concat(names, ", "), table.concat(lost))
end

function M.moved(why)
  return "runs again on another provider: " .. text.terminal_line(tostring(why):match("^[^\n]*"))
end

return M
