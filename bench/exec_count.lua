--[[
N sequential `sb:exec{"/bin/true"}`, for counting the host's instructions
per exec with callgrind (repeatable however busy the machine is):

  valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    build/smolwf bench/exec_count.lua PROVIDER N [PROFILE]

once with N and once with 3N; the difference of the two totals over 2N
is the cost of one exec (start-up and the first open cancel out).
PROVIDER: build/smolwf-provider (PROFILE default local/default), or
build/bench/smolwf-bench-provider with PROFILE bench/none.
]]
local sandbox = require "smol.sandbox"
local USAGE = "usage: exec_count.lua PROVIDER N [PROFILE]"
local provider = assert(arg[1], USAGE)
local n = assert(math.tointeger(tonumber(arg[2] or "")), USAGE)
local sb = sandbox.open{program = provider, profile = arg[3] or "local/default", workspace = ""}
for _ = 1, n do sb:exec{"/bin/true"} end
sb:close()
