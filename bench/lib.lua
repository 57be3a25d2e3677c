-- What the Lua benchmarks share. Each loads it next to itself:
--   local lib = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua")
local M = {}

-- The median of a list of numbers (the mean of the middle two for an even
-- count); the list itself is left as it is.
function M.median(list)
  local s = table.move(list, 1, #list, 1, {})
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

-- The bounds of the middle half of a list of numbers (sorted in place).
function M.middle_half(list)
  table.sort(list)
  local n = #list
  return list[n // 4 + 1], list[n - n // 4]
end

return M
