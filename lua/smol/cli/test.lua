-- `smolwf test [OPTIONS] [PATHS...]`: runs busted specs inside the host, so
-- every spec has smol.sandbox, smol.task, smol.testing and the workflow
-- engine. Our options are taken out; everything else goes to busted as is
-- (output handlers, tags, filters...). Without PATHS busted runs spec/.
local M = {}

M.USAGE = [[
usage: smolwf test [OPTIONS] [BUSTED OPTIONS] [PATHS...]

Runs busted specs (default: spec/) inside smolwf.

options:
  --update-golden   rewrite the golden files that differ (testing.golden)
  --record FILE     record every line exchanged with providers (JSON Lines)
  --replay FILE     answer every provider request from a recording
  --help            this text, then busted's own options

Every other option is busted's, e.g. -o TAP, -o junit, --tags=T, --filter=P.
]]

local VALUED = {["--record"] = true, ["--replay"] = true}

--- Splits our options from busted's; returns opts, busted_args or nil, message.
function M.parse(args)
  local opts, rest = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    if a == "--update-golden" then
      opts.update_golden = true
    elseif VALUED[name or a] then
      local value = inline
      if not value then i = i + 1; value = args[i] end
      if value == nil or value == "" then return nil, (name or a) .. " needs a FILE" end
      opts[(name or a):sub(3)] = value
    else
      if a == "--help" or a == "-h" then opts.help = true end
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return opts, rest
end

local function start(opts)
  if opts.update_golden then require("smol.testing.golden").update = true end
  if opts.replay then require("smol.replay").install(opts.replay) end
  if opts.record then return require("smol.record").start(opts.record) end
end

-- busted reads the global `arg`, and exits the process itself when a test
-- fails; it returns when everything passed. Modules loaded before busted
-- starts survive its per-file insulation (which unloads what a spec file
-- loaded): one task scheduler with its exit hooks, one provider pool.
local function run_busted(busted_args)
  for _, name in ipairs{"smol.task", "smol.jsonl", "smol.sandbox", "smol.testing"} do require(name) end
  local saved = _G.arg
  _G.arg = busted_args
  busted_args[0] = "smolwf test"
  -- busted names itself after the file that calls its runner: this chunk.
  local call = load("require('busted.runner')({standalone = false})", "@smolwf test")
  call()
  _G.arg = saved
end

function M.main(args)
  local opts, rest = M.parse(args)
  if not opts then
    io.stderr:write("smolwf test: ", rest, "\n", M.USAGE)
    return 2
  end
  if opts.help then io.stdout:write(M.USAGE, "\n") end
  local ok, recording = pcall(start, opts)
  if not ok then
    io.stderr:write("smolwf test: ", tostring(recording), "\n")
    return 2
  end
  run_busted(rest)
  if recording then recording:stop() end
  return 0
end

return M
