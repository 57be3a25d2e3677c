-- `smolwf run [OPTIONS] FILE [ARGS]`: runs the workflow FILE returns, or
-- just runs FILE when it is a plain script that returns no workflow.
local wf = require "smol.workflow"
local env = require "smol.workflow.env"
local options = require "smol.workflow.options"

local M = {}

M.USAGE = options.USAGE
M.parse = options.parse
local usage_error = options.usage_error

-- Errors before or around the run that are the user's setup, not a bug:
-- one line, exit 2, no traceback.
local function is_setup_error(err)
  return type(err) == "table" and (err.code == "usage" or err.code == "setup" or wf.is_invalid(err))
end

local Usage = { __tostring = function(e) return e.message end }
local function setup_error(fmt, ...)
  error(setmetatable({ code = "setup", message = fmt:format(...) }, Usage), 0)
end

local function add_paths(paths)
  for k = #paths, 1, -1 do
    package.path = paths[k] .. "/?.lua;" .. paths[k] .. "/?/init.lua;" .. package.path
  end
end

-- The traceback of an error raised `level` frames up, cut where our
-- xpcall ran the code (the frames below say nothing).
local function trimmed_traceback(err, level)
  local message = tostring(err)
  local lines = { message, "stack traceback:" }
  local frames = debug.traceback("", level + 1):match("stack traceback:\n(.*)$") or ""
  for line in frames:gmatch("[^\n]+") do
    if line:find("in function 'xpcall'", 1, true) or line:find("smol/cli/run.lua", 1, true) then break end
    lines[#lines + 1] = line
  end
  return table.concat(lines, "\n")
end

-- Keeps tables (our error values) as they are; adds a traceback to the rest.
local function traceback_handler(err)
  if type(err) == "table" then return err end
  local tb = trimmed_traceback(err, 2)
  return tb  -- not a tail call: that would drop this frame and shift `level`
end

-- For errors in the user's file: only the user's frames (core.traceback
-- hides the engine's and C's unless SMOLWF_TRACE=1). An invalid workflow
-- stays a table (its one line is the message); another error with a
-- __tostring (a sandbox's) gets the traceback a string has.
local function user_traceback_handler(err)
  if type(err) == "table" and (wf.is_invalid(err) or not (getmetatable(err) or {}).__tostring) then return err end
  local tb = require("smol.core").traceback(tostring(err), 2)
  return tb  -- not a tail call: that would drop this frame and shift the level
end

local function file_label(file)
  if file == "-" then return "stdin" end
  return (file:gsub("/+$", ""):match("([^/]+)$") or file):gsub("%.lua$", "")
end

-- Runs FILE in the workflow environment; returns what it returned, or nil
-- and an exit status after printing why it could not run.
local function load_workflow(opts)
  local arg_table = { [0] = opts.file }
  table.move(opts.script_args, 1, #opts.script_args, 1, arg_table)
  arg = arg_table  -- the global too, as lua.c sets it, for modules that read it
  local chunk, err = env.load_file(opts.file, { arg = arg_table })
  if not chunk then
    local untaken = opts.untaken
    if untaken and untaken.word == opts.file then   -- `--graph svg wf.lua`: svg was taken for FILE
      err = ("%s (`%s` follows %s, %s)"):format(err, untaken.word, untaken.option, untaken.hint)
    end
    io.stderr:write("smolwf run: ", err, "\n")
    return nil, 2
  end
  local result = table.pack(xpcall(chunk, user_traceback_handler, table.unpack(opts.script_args)))
  if not result[1] then
    local err = result[2]
    if wf.is_invalid(err) then require("smol.workflow.validate").named(err, file_label(opts.file)) end
    io.stderr:write("smolwf run: ", tostring(err), "\n")
    return nil, wf.is_invalid(err) and 2 or 1
  end
  return result[2]
end

-- The exit status a plain script's result asks for, as `smolwf FILE` has
-- it: an integer 0-255 is the status, false is 1, anything else 0.
local function script_status(value, file)
  if value == false then return 1 end
  if math.type(value) ~= "integer" then return 0 end
  if value >= 0 and value <= 255 then return value end
  io.stderr:write(("smolwf run: %s returned %d, not an exit status (0-255)\n"):format(file, value))
  return 1
end

local function looks_like_workflow(v)
  return type(v) == "table" and (wf.is_workflow(v) or v.steps ~= nil)
end

local function encode_json(value)
  return require("smol.workflow.jsontext").encode(value)
end

local function instance_json(inst)
  local jsontext = require "smol.workflow.jsontext"
  return { id = inst.id, step = inst.step, needs = jsontext.array(inst.needs),
    matrix = inst.matrix and jsontext.plain(inst.matrix) or jsontext.opt(nil),
    always = inst.always or false, continue_on_error = inst.continue_on_error or false,
    timeout = jsontext.opt(inst.timeout) }
end

-- --list --json and --dry-run --json: one JSON document on stdout.
local function print_plan_json(def, opts, name)
  local jsontext = require "smol.workflow.jsontext"
  local list = {}
  for i, inst in ipairs(wf.instances(def, opts.steps)) do list[i] = instance_json(inst) end
  io.stdout:write(encode_json { workflow = name, dry_run = opts.dry_run or false,
    instances = jsontext.array(list) }, "\n")
end

local function print_dry_run(def, opts, name)
  if opts.json then return print_plan_json(def, opts, name) end
  local instances = wf.instances(def, opts.steps)
  io.stdout:write(("workflow '%s': %d step instance%s would run, in this order:\n")
    :format(name, #instances, #instances == 1 and "" or "s"))
  for i, inst in ipairs(instances) do
    local needs = #inst.needs > 0 and ("  (needs " .. table.concat(inst.needs, ", ") .. ")") or ""
    io.stdout:write(("%3d. %s%s\n"):format(i, inst.id, needs))
  end
end

local function new_observer(name, opts)
  return require(name).new(opts)
end

local function observers_for(opts, masker)
  local list = {}
  if opts.json then
    list[#list + 1] = new_observer("smol.workflow.events", { out = io.stdout, mask = masker })
  elseif not opts.no_progress then
    list[#list + 1] = new_observer("smol.workflow.progress", { out = io.stdout })
  end
  return list
end

-- "auto/default (no isolation, network on)": what a session really got.
function M.describe_sandbox(info)
  local profile = info.profile
  if info.provider_profile and info.provider_profile ~= info.profile then
    profile = profile .. " → " .. info.provider_profile
  end
  local isolation = info.isolation == "none" and "no isolation" or ("isolation: " .. info.isolation)
  local network = info.network == true and ", network on" or info.network == false and ", no network" or ""
  return ("%s (%s%s)"):format(profile, isolation, network)
end

-- One line naming the sandboxes the steps really ran in (a fallback to no
-- isolation must not go unnoticed).
local function sandbox_line(run)
  local seen, parts = {}, {}
  for _, info in ipairs(run.sessions or {}) do
    local text = M.describe_sandbox(info)
    if not seen[text] then seen[text] = true; parts[#parts + 1] = text end
  end
  if #parts == 0 then return nil end
  return "sandbox: " .. table.concat(parts, "; ")
end

local function print_summary(run, opts, masker)
  local out = opts.json and io.stderr or io.stdout
  out:write(masker:text(require("smol.workflow.summary").render(run, {})), "\n")
  local line = sandbox_line(run)
  if line then out:write(line, "\n") end
  if run.pool then out:write(masker:text(require("smol.workflow.pool_view").summary(run.pool.providers)), "\n") end
end

-- The steps --explain names, as a set; an unknown one is a usage error.
local function explained_steps(opts, instances)
  if #opts.explain == 0 then return nil end
  local known, names = {}, {}
  for _, inst in ipairs(instances) do
    if not known[inst.step] then names[#names + 1] = inst.step end
    known[inst.step], known[inst.id] = true, true
  end
  local set = {}
  for _, name in ipairs(opts.explain) do
    if not known[name] then
      local hint = require("smol.workflow.validate").closest(name, names)
      usage_error("--explain: no step '%s' in this run%s", name,
        hint and (" (did you mean '%s'?)"):format(hint) or (" (steps: %s)"):format(table.concat(names, ", ")))
    end
    set[name] = true
  end
  return set
end

-- The report directory --resume names, or the latest run of `name`.
local function resume_dir(opts, name)
  if opts.resume ~= true then return opts.resume end
  local dir = require("smol.workflow.resume").latest(".smolwf/runs", name)
  if not dir then usage_error("--resume: no earlier run of workflow '%s' in .smolwf/runs (name one: --resume DIR)", name) end
  return dir
end

-- wf.run's options from the command line's.
local function run_options(opts, instances, secrets)
  return { jobs = opts.jobs, steps = opts.steps, params = opts.params, keep_going = opts.keep_going,
    report_dir = opts.report_dir, grace = opts.grace, secrets = secrets, profile = opts.profile,
    cache_read = not opts.no_cache, cache_dir = opts.cache_dir, cache_cap = opts.cache_cap,
    explain = explained_steps(opts, instances), keep_runs = opts.keep_runs, log_cap = opts.log_cap,
    on_explain = function(inst, lines)
      io.stderr:write(secrets.masker:text(("explain %s: %s\n"):format(inst.id, table.concat(lines, "\n"))))
    end }
end

local function run_workflow(def, opts)
  local name = def.name or file_label(opts.file)
  if opts.list and opts.json then print_plan_json(def, opts, name); return 0 end
  if opts.list then io.stdout:write(wf.tree(def), "\n"); return 0 end
  if opts.graph then
    local graph = require "smol.workflow.graph"
    io.stdout:write(graph.FORMATS[opts.graph](wf.instances(def, opts.steps), name))
    return 0
  end
  if opts.dry_run then print_dry_run(def, opts, name); return 0 end
  local instances = wf.instances(def, opts.steps)  -- an unknown --step is an invalid run: say so before any output
  local secrets = wf.secrets(def, opts.params)
  local masker = secrets.masker
  require("smol.recording.record").mask_current(masker)   -- a recording holds no secret either
  local run_opts = run_options(opts, instances, secrets)
  run_opts.name, run_opts.observers = name, observers_for(opts, masker)
  run_opts.resume = opts.resume and resume_dir(opts, name)
  run_opts.on_abort = function(run) print_summary(run, opts, masker) end
  local run = wf.run(def, run_opts)
  print_summary(run, opts, masker)
  return wf.exit_code(run)
end

-- A missing or broken recording, or a place one cannot be written, is a
-- setup error: one line naming the file.
local function start_recording(opts)
  if opts.replay then
    local ok, err = pcall(require("smol.recording.replay").install, opts.replay)
    if not ok then setup_error("--replay %s: %s", opts.replay, tostring(err)) end
  end
  if opts.record then
    local ok, rec = pcall(require("smol.recording.record").start, opts.record)
    if not ok then setup_error("--record %s: %s", opts.record, tostring(rec)) end
    return rec
  end
end

local function main(args)
  local opts = M.parse(args)
  if opts.help then io.stdout:write(M.USAGE); return 0 end
  if not opts.file then usage_error("no FILE given (see smolwf run --help)") end
  add_paths(opts.paths)
  local recording = start_recording(opts)
  local value, status = load_workflow(opts)
  local code = status or 0
  if not status and looks_like_workflow(value) then
    if not wf.is_workflow(value) then
      local ok, err = pcall(wf.define, value)
      if not ok then error(wf.is_invalid(err) and require("smol.workflow.validate").named(err,
        file_label(opts.file)) or err, 0) end
    end
    code = run_workflow(value, opts)
  elseif not status and (opts.list or opts.dry_run or opts.graph or #opts.steps > 0) then
    usage_error("%s did not return a workflow (wf.define{...})", opts.file)
  elseif not status then
    code = script_status(value, opts.file)
  end
  if recording then recording:stop() end
  return code
end

-- Returns the exit status; usage errors and invalid workflows give 2.
function M.main(args)
  local ok, code = xpcall(main, traceback_handler, args or {})
  if ok then return code end
  if is_setup_error(code) then
    io.stderr:write("smolwf run: ", tostring(code.message), "\n")
    return 2
  end
  error(code, 0)
end

return M
