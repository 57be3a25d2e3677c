--[[
Two or more provider builds (or profiles) against each other, in one run:

  smolwf bench/exec_ab.lua SPAWN_LOOP PROFILE LABEL=PROGRAM [LABEL=PROGRAM...] [ROUNDS]

Each PROGRAM (a smolwf-provider, or a command line: `env X=1 /path/smolwf-provider`)
gets one PROFILE session, and the rounds interleave them with the plain loop
(SPAWN_LOOP is smolwf-bench-spawn-loop): in each round, BATCH plain
starts, then BATCH sb:exec{"/bin/true"} through every program in turn,
each round starting with the next program, so that none always runs right
after the plain loop or right after another one.
It prints each program's median exec, its ratio to the plain loop (the
median of the rounds' ratios, as provider_bench.lua's), and its ratio to
the first program (the median of the rounds' ratios too): before and
after, measured side by side at the same moments of a noisy machine, where
two runs of provider_bench.lua minutes apart differ by more than most
changes do. Keep ROUNDS at its default of 20 or more: a build against
itself measured 0.99-1.00x in 20 rounds, and 1.146x in a run of 6.
]]
local sandbox = require "smol.sandbox"
local lib = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua")
local median, middle_half, exec_ms = lib.median, lib.middle_half, lib.exec_ms

local USAGE = "usage: exec_ab.lua SPAWN_LOOP PROFILE LABEL=PROGRAM [LABEL=PROGRAM...] [ROUNDS]"
local BATCH = 40

local function parse_args()
  local spawn_loop, profile = assert(arg[1], USAGE), assert(arg[2], USAGE)
  local arms, rounds = {}, 20
  for i = 3, #arg do
    local label, program = arg[i]:match("^([^=]+)=(.+)$")
    if label then
      local argv = {}
      for word in program:gmatch("%S+") do argv[#argv + 1] = word end
      arms[#arms + 1] = {label = label, program = #argv == 1 and argv[1] or argv}
    else
      rounds = assert(tonumber(arg[i]), USAGE)
    end
  end
  assert(#arms >= 1, USAGE)
  return spawn_loop, profile, arms, rounds
end

local function range(list)
  local low, high = middle_half(list)
  return ("middle half %.3f-%.3f"):format(low, high)
end

local function run()
  local spawn_loop, profile, arms, rounds = parse_args()
  local plain, stop_plain = lib.batch_server({spawn_loop, "--serve", "/bin/true"})
  for _, a in ipairs(arms) do
    a.sb = sandbox.open{program = a.program, profile = profile, workspace = ""}
    exec_ms(a.sb, 100, {})   -- warm up (and give a session time to settle)
    a.ms, a.to_plain, a.to_first = {}, {}, {}
  end
  plain(BATCH, {})
  for r = 1, rounds do
    local p = {}
    plain(BATCH, p)
    -- each round starts with the next program (see the top)
    for k = 0, #arms - 1 do
      local a = arms[(r + k) % #arms + 1]
      local v = {}
      exec_ms(a.sb, BATCH, v)
      table.move(v, 1, #v, #a.ms + 1, a.ms)
      a.round = median(v)
      a.to_plain[r] = a.round / median(p)
    end
    for _, a in ipairs(arms) do a.to_first[r] = a.round / arms[1].round end
  end
  stop_plain()
  print(("%s, %d rounds of %d execs per program and %d plain starts"):format(profile, rounds, BATCH, BATCH))
  for _, a in ipairs(arms) do
    print(("%-12s %.3f ms   %.3fx the plain loop (%s)   %.3fx %s (%s)"):format(a.label, median(a.ms),
      median(a.to_plain), range(a.to_plain), median(a.to_first), arms[1].label, range(a.to_first)))
    a.sb:close()
  end
  sandbox.shutdown()
end

run()
