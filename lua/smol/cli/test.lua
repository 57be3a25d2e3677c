-- `smolwf test [OPTIONS] [PATHS...]`: runs busted specs inside the host, so
-- every spec has smol.sandbox, smol.task, smol.testing and the workflow
-- engine. Our options are taken out; everything else goes to busted as is
-- (output handlers, tags, filters...), after busted's own parser accepted
-- it. Without PATHS busted runs spec/.
local M = {}

M.USAGE = [[
usage: smolwf test [OPTIONS] [BUSTED OPTIONS] [PATHS...]

Runs busted specs inside smolwf, so every spec has smol.sandbox, smol.task,
smol.testing and the workflow engine. PATHS are spec files or folders
(default: spec/). busted's settings file .busted in the current folder
applies as with busted itself (e.g. a helper loaded before the specs).

examples:
  smolwf test                          every *_spec.lua under spec/
  smolwf test spec/build_spec.lua      one file
  smolwf test --filter='builds' -o TAP only tests whose name matches, as TAP

options:
  --update-golden   rewrite the golden files that differ (testing.golden)
  --record FILE     record every line exchanged with providers (JSON Lines)
  --replay FILE     answer every provider request from a recording
  --help-busted     list busted's options; they all pass through as they are
                    (e.g. -o TAP, -o junit, --tags=T, --filter=P)
  --help            this text

exit status: 0 every test passed, 1 a test failed or a spec did not load,
2 usage error (unknown option, a PATH that is not there, unreadable
--replay file).
]]

local VALUED = {["--record"] = true, ["--replay"] = true}
local FLAGS = {["--update-golden"] = "update_golden", ["--help-busted"] = "help_busted",
  ["--help"] = "help", ["-h"] = "help"}

-- Takes our valued option at args[i] (`--opt FILE` or `--opt=FILE`); returns
-- the value and the index of the last argument used, or nil and a message.
local function option_value(args, i, name, inline)
  local value = inline
  if not value then i = i + 1; value = args[i] end
  if value == nil or value == "" then return nil, name .. " needs a FILE" end
  return value, i
end

--- Splits our options from busted's; returns opts (opts.busted_args: the
--- rest, in order) or nil and a message. After `--` everything is busted's.
function M.parse(args)
  local opts, rest = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    if a == "--" then
      table.move(args, i, #args, #rest + 1, rest)
      break
    elseif FLAGS[a] then
      opts[FLAGS[a]] = true
    elseif VALUED[name or a] then
      local value, at = option_value(args, i, name or a, inline)
      if not value then return nil, at end
      opts[(name or a):sub(3)], i = value, at
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  opts.busted_args = rest
  return opts
end

-- busted's command line parser, set up as the runner sets it up.
local function busted_cli()
  local cli = require("busted.modules.cli")({standalone = false, output = "plainTerminal"})
  cli:set_name("smolwf test")
  return cli
end

-- busted reports a parse error (and its --help text) as
-- "NAME: error: TEXT; re-run with --help for usage." (prefix and suffix
-- each optional, depending on the error); returns TEXT.
local function busted_message(err)
  local text = err:gsub("^smolwf test: error: ", "", 1)
  return (text:gsub("; re%-run with %-%-help for usage%.$", "", 1))
end

-- What is wrong with the PATHS busted would run (relative to its -C
-- directory), or nil when each is there.
local function paths_error(parsed)
  local lfs = require "lfs"
  for _, root in ipairs(parsed.ROOT or {}) do
    local path = root:sub(1, 1) == "/" and root or (parsed.directory .. "/" .. root)
    if not lfs.attributes(path) then
      if #parsed.ROOT == 1 and root == "spec" then
        return "no spec/ folder here: name the spec files or folders to run"
      end
      return ("no such file or folder: %s"):format(root)
    end
  end
end

--- busted's verdict on the arguments we pass it: nil when it accepts them
--- and the PATHS exist, else one line saying what is wrong.
function M.busted_args_error(busted_args)
  -- --ignore-lua: busted's parser itself re-runs the command under --lua=X
  local checked = {"--ignore-lua"}
  table.move(busted_args, 1, #busted_args, 2, checked)
  local ok, err = busted_cli():parse(checked)
  if ok then return paths_error(ok) end
  local why = busted_message(err)
  local flag = why:match("^unknown/bad flag: (.*)$")
  if flag then return ("unknown option '%s'"):format(flag) end
  return (why:gsub("\n.*", ""))
end

--- busted's own help, under a heading that says how it relates to ours.
function M.busted_help()
  local _, err = busted_cli():parse({"--help"})
  return "busted's options, passed through by smolwf test as they are\n"
    .. "(smolwf test's own options: smolwf test --help):\n\n" .. busted_message(err) .. "\n"
end

local function usage_error(message)
  io.stderr:write("smolwf test: ", message, " (see smolwf test --help)\n")
  return 2
end

local function start(opts)
  if opts.update_golden then require("smol.testing.golden").update = true end
  if opts.replay then require("smol.recording.replay").install(opts.replay) end
  if opts.record then return require("smol.recording.record").start(opts.record) end
end

--- Loads the modules every spec file shares. Modules loaded before busted
--- runs a file survive its per-file insulation (which unloads what the file
--- loaded): one task scheduler with its exit hooks, one provider pool.
function M.load_shared_modules()
  for _, name in ipairs{"smol.task", "smol.jsonl", "smol.sandbox", "smol.testing"} do require(name) end
end

-- busted reads the global `arg`, and exits the process itself when a test
-- fails; it returns when everything passed.
local function run_busted(busted_args)
  M.load_shared_modules()
  local saved = _G.arg
  _G.arg = busted_args
  busted_args[0] = "smolwf test"
  -- busted names itself after the file that calls its runner: this chunk.
  local call = load("require('busted.runner')({standalone = false})", "@smolwf test")
  call()
  _G.arg = saved
end

function M.main(args)
  local opts, err = M.parse(args)
  if not opts then return usage_error(err) end
  if opts.help then io.stdout:write(M.USAGE); return 0 end
  if opts.help_busted then io.stdout:write(M.busted_help()); return 0 end
  err = M.busted_args_error(opts.busted_args)
  if err then return usage_error(err) end
  local ok, recording = pcall(start, opts)
  if not ok then
    io.stderr:write("smolwf test: ", tostring(recording), "\n")
    return 2
  end
  run_busted(opts.busted_args)
  if recording then recording:stop() end
  return 0
end

return M
