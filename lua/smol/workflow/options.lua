-- The command line of `smolwf run`, GNU style: options may come before or
-- after FILE, the first other word is FILE and the words after it are the
-- script's arguments, and everything after `--` goes to the script as it
-- is (`smolwf run wf.lua --jobs 2 -- --jobs 9`: jobs 2 for the run, the
-- script's arg[1] is "--jobs"). A word that is not an option gets a "did
-- you mean" naming the closest one.
local validate = require "smol.workflow.validate"

local M = {}

M.USAGE = [[
usage: smolwf run [OPTIONS] FILE [ARGS...] [-- SCRIPT_ARGS...]

Runs the workflow that the Lua file FILE returns (wf.define{...}); a plain
script that returns nothing just runs. Options may come before or after
FILE; ARGS and everything after `--` are the script's `arg` / `...`.

options:
  --jobs N          run at most N steps at once (overrides the workflow's jobs)
  --step NAME       run only NAME and the steps it needs (repeatable)
  --list            print the steps and their dependencies as a tree
  --dry-run         print what would run, in order, and run nothing
  --graph [FORMAT]  print the expanded step graph as dot (default) or mermaid
  --param K=V       set ctx.params.K (repeatable)
  --profile P       run every session with profile P (overrides the workflow's)
  --keep-going      a failed step does not cancel the independent ones
  --no-cache        run every step, ignoring cached results (still stores them)
  --explain STEP    say which part of STEP's cache key changed (repeatable)
  --resume [DIR]    re-run what failed, was cancelled or skipped in the run
                    in DIR (default: the latest run of this workflow)
  --report-dir DIR  where logs, artifacts and reports go
                    (default .smolwf/runs/<timestamp>)
  --keep-runs N     keep the last N runs in .smolwf/runs (default 20)
  --log-cap SIZE    keep the last SIZE bytes of each log stream (default 64M)
  --grace SECONDS   time `always` steps get after Ctrl-C or TERM (default 30)
  --cache-dir DIR   the step cache (default .smolwf/cache)
  --cache-cap SIZE  evict least recently used entries beyond SIZE (default 2G)
  --json            one JSON event per line on stdout, no live view
  --no-progress     no live view or step lines (the summary still prints)
  --path DIR        also look for Lua modules in DIR (repeatable)
  --record FILE     record every line exchanged with providers (JSON Lines)
  --replay FILE     answer every provider request from a recording
  --help            this text

exit status: 0 every required step succeeded, 1 a step failed,
2 invalid workflow or usage, 130 interrupted (Ctrl-C; 143 for TERM).
A plain script exits with what it returns: an integer 0-255 as it is,
false as 1, anything else as 0 (os.exit(N): N; an error: 1).
]]

local Usage = { __tostring = function(e) return e.message end }
function M.usage_error(fmt, ...)
  error(setmetatable({ code = "usage", message = fmt:format(...) }, Usage), 0)
end
local usage_error = M.usage_error

local FLAGS = { ["--list"] = "list", ["--dry-run"] = "dry_run", ["--keep-going"] = "keep_going",
  ["--json"] = "json", ["--no-progress"] = "no_progress", ["--no-cache"] = "no_cache",
  ["--help"] = "help", ["-h"] = "help" }

local function count(name, value)
  local n = math.tointeger(tonumber(value))
  if not n or n < 1 then usage_error("%s needs a positive integer, got '%s'", name, value) end
  return n
end

local function seconds(name, value)
  local n = tonumber(value)
  if not n or n < 0 or n ~= n then usage_error("%s needs a number of seconds >= 0, got '%s'", name, value) end
  return n
end

local SIZE_UNITS = { [""] = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3 }

-- "64M", "1G", "5000": bytes.
function M.size(name, value)
  local digits, unit = tostring(value):match("^(%d+)([KMG]?)i?B?$")
  if not digits then usage_error("%s needs a size in bytes (e.g. 500M, 2G), got '%s'", name, value) end
  return math.tointeger(tonumber(digits) * SIZE_UNITS[unit])
end

local function list(field)
  return function(opts, _, value) table.insert(opts[field], value) end
end

local function set(field, convert)
  return function(opts, name, value) opts[field] = convert and convert(name, value) or value end
end

-- "PROVIDER/NAME", as sandbox.open takes it: checked here, before any step fails on it.
local function profile_name(name, value)
  if not value:match("^[^/]+/.+$") then
    usage_error("%s needs PROVIDER/NAME (e.g. bwrap/default), got '%s'", name, value)
  end
  return value
end

local function param(opts, _, value)
  local k, v = value:match("^([^=]+)=(.*)$")
  if not k then usage_error("--param needs KEY=VALUE, got '%s'", value) end
  opts.params[k] = v
end

-- Options with a value: how each is stored.
local VALUED = {
  ["--jobs"] = set("jobs", count), ["--step"] = list("steps"), ["--param"] = param,
  ["--report-dir"] = set("report_dir"), ["--path"] = list("paths"), ["--record"] = set("record"),
  ["--replay"] = set("replay"), ["--profile"] = set("profile", profile_name), ["--explain"] = list("explain"),
  ["--keep-runs"] = set("keep_runs", count), ["--grace"] = set("grace", seconds),
  ["--log-cap"] = set("log_cap", M.size), ["--cache-dir"] = set("cache_dir"),
  ["--cache-cap"] = set("cache_cap", M.size),
}

local GRAPH_FORMATS = { dot = true, mermaid = true }

-- Options whose value may be left out; `takes(word)` says whether the next
-- word is their value (a format name, a report directory).
-- `hint` says why the next word was not taken, should it be no FILE.
local OPTIONAL = {
  ["--graph"] = { field = "graph", default = "dot", takes = function(w) return GRAPH_FORMATS[w] end,
    hint = "which takes dot or mermaid",
    check = function(v) if not GRAPH_FORMATS[v] then usage_error("--graph takes dot or mermaid, got '%s'", v) end end },
  ["--resume"] = { field = "resume", default = true, takes = function(w)
    local lfs = require "lfs"
    return lfs.attributes(w .. "/report.json", "mode") == "file"
  end, hint = "which takes a run's report directory: one holding report.json" },
}

local function known_options()
  local names = {}
  for _, t in ipairs { FLAGS, VALUED, OPTIONAL } do
    for name in pairs(t) do if name:sub(1, 2) == "--" then names[#names + 1] = name end end
  end
  return names
end

local function unknown_option(word)
  local hint = validate.closest(word:match("^[^=]*"), known_options())
  local where = " (see smolwf run --help; options for the script go after `--`)"
  if hint then where = (" (did you mean '%s'?)"):format(hint) end
  usage_error("unknown option '%s'%s", word, where)
end

-- Handles the option at args[i]; returns the index of the next word.
local function take_option(opts, args, i)
  local word = args[i]
  local name, inline = word:match("^(%-%-[%w-]+)=(.*)$")
  name = name or word
  if FLAGS[word] then opts[FLAGS[word]] = true; return i + 1 end
  if VALUED[name] then
    local value = inline
    if not value then i = i + 1; value = args[i] end
    if value == nil then usage_error("%s needs a value", name) end
    VALUED[name](opts, name, value)
    return i + 1
  end
  local optional = OPTIONAL[name]
  if not optional then unknown_option(word) end
  local value = inline
  if not value and args[i + 1] and optional.takes(args[i + 1]) then i = i + 1; value = args[i]
  elseif not value and args[i + 1] then
    opts.untaken = { option = name, word = args[i + 1], hint = optional.hint }
  end
  if value and optional.check then optional.check(value) end
  opts[optional.field] = value or optional.default
  return i + 1
end

function M.parse(args)
  local opts = { steps = {}, params = {}, paths = {}, explain = {}, script_args = {} }
  local positional, i = {}, 1
  while i <= #args do
    local word = args[i]
    if word == "--" then
      table.move(args, i + 1, #args, #positional + 1, positional)
      break
    elseif word:sub(1, 1) == "-" and word ~= "-" then
      i = take_option(opts, args, i)
    else
      positional[#positional + 1] = word
      i = i + 1
    end
  end
  opts.file = positional[1]
  table.move(positional, 2, #positional, 1, opts.script_args)
  return opts
end

return M
