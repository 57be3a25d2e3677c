-- The replay provider, as a Lua provider file:
--   smolwf provider serve lua/smol/recording/replay_provider.lua RECORDING [--ignore=FIELD]... [--program=P]
-- (replay.program(RECORDING) is the argv of that for sandbox.open).
-- --program=P prefers the exchanges recorded with provider program P.
local replay = require "smol.recording.replay"

local args = {...}
local path = args[1]
if not path then error("usage: smolwf provider serve lua/smol/recording/replay_provider.lua RECORDING [--ignore=FIELD]...", 0) end
local opts = {ignore = {}}
for i = 2, #args do
  local ignore = args[i]:match("^%-%-ignore=(.+)$")
  local program = args[i]:match("^%-%-program=(.+)$")
  if ignore then
    opts.ignore[#opts.ignore + 1] = ignore
  elseif program then
    opts.program = program
  else
    error("replay provider: unknown argument `" .. args[i] .. "`", 0)
  end
end
return replay.methods(path, opts)
