--[[
smol.slurm.lists: Slurm's compact lists of numbers, read without the
controller (host names are expanded by `scontrol show hostnames`).

  lists.count_ids("0-1,4")        -> 3   (CPU_IDs of `scontrol show job -d`)
  lists.expand_counts("2(x3),1")  -> {2, 2, 2, 1}   (SLURM_JOB_CPUS_PER_NODE)
]]

local lists = {}

local function bad(what, text)
  error(("slurm: cannot read %s %q"):format(what, tostring(text)), 0)
end

-- How many ids a list of ids and ranges names.
function lists.count_ids(text)
  local n = 0
  for item in tostring(text):gmatch("[^,]+") do
    local first, last = item:match("^(%d+)%-(%d+)$")
    if first then
      n = n + tonumber(last) - tonumber(first) + 1
    elseif item:match("^%d+$") then
      n = n + 1
    else
      bad("the id list", text)
    end
  end
  return n
end

-- One count per node from "C" and "C(xN)" items.
function lists.expand_counts(text)
  local counts = {}
  for item in tostring(text):gmatch("[^,]+") do
    local count, times = item:match("^(%d+)%(x(%d+)%)$")
    if not count then count, times = item:match("^(%d+)$"), 1 end
    if not count then bad("the count list", text) end
    for _ = 1, tonumber(times) do counts[#counts + 1] = tonumber(count) end
  end
  return counts
end

return lists
