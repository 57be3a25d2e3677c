-- What the Lua benchmarks share. Each loads it next to itself:
--   local lib = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua")
local core = require "smol.core"
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

-- A batch server (bench/batches.h) started as args: run(k, into) times k
-- starts and appends their ms to into; stop() ends it.
function M.batch_server(args)
  local wire = require "smol.provider.conformance.wire"   -- here: most benchmarks run no batch server
  local buffered, lines = "", {}
  local proc = assert(core.spawn{file = args[1], args = args, stdin = true,
    stdout = "chunks", on_stdout = function(chunk)
      if not chunk then return end
      buffered = buffered .. chunk
      for line in buffered:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
      buffered = buffered:match("[^\n]*$")
    end})
  local function run(k, into)
    proc:write(k .. "\n")
    wire.wait_until(function() return #lines > 0 end, 60)
    local line = assert(table.remove(lines, 1), args[1] .. " did not answer")
    for us in line:gmatch("%S+") do into[#into + 1] = tonumber(us) / 1000 end
  end
  local function stop()
    proc:close_stdin()
    wire.wait_until(function() return false end, 0.05)
    proc:close()
  end
  return run, stop
end

-- Milliseconds of each of n sequential sb:exec{"/bin/true"}, appended to into.
function M.exec_ms(sb, n, into)
  for _ = 1, n do
    local t0 = core.now()
    assert(sb:exec{"/bin/true"}.exit_code == 0, "exec /bin/true failed")
    into[#into + 1] = (core.now() - t0) * 1000
  end
end

return M
