--[[
smol.workflow: workflows as Lua tables of steps that run in sandboxes.

  local wf = require "smol.workflow"
  return wf.define{
    name = "ci",                                   -- optional
    sandbox = {profile = "auto/default", workspace = "."},  -- the steps' shared session
                                                   -- (pool = {...}: each step placed on a provider
                                                   -- of a pool, smol.workflow.placement)
    jobs = 4,                                      -- concurrency cap (--jobs overrides)
    params = {mode = "debug"},                     -- defaults of ctx.params (--param k=v)
    steps = {
      {name = "build", run = function(ctx) ctx:sh("make"); return {bin = "app"} end},
      {name = "test", needs = "build", matrix = {shard = {1, 2}}, timeout = 60,
       retry = {attempts = 3, backoff = 0.5, when = function(f) return f.exit_code == 75 end},
       run = function(ctx) ctx:sh("./" .. ctx.inputs.build.bin .. " " .. ctx.matrix.shard) end},
      {name = "collect", needs = "test", always = true,
       run = function(ctx) ctx:save_artifact("out/logs") end},
    },
  }

Workflow fields besides name, sandbox, jobs, params, steps: env (every
command of every step), secrets ({NAME = {env = VAR} or {param = name}}:
commands get $NAME, text leaving the host has them masked; see
smol.workflow.secrets).

Step fields: name, run(ctx) (required); needs (a name or a list), timeout
(seconds, per attempt), matrix ({key = {values...}, include = {...},
exclude = {...}}, as GitHub Actions has them: one instance per
combination, "test[shard=2]"; see smol.workflow.plan), retry {attempts
(total, default 1), backoff (seconds before the 2nd attempt, doubling
after), when(failure) -> bool}, continue_on_error, always, sandbox (the
step's own session, one per instance), isolate (each instance its own
session, forked from the shared one where the provider can), env (merged
over the workflow's), when / if (function(ctx) -> bool[, reason]: false
skips the step), inputs and outputs (file patterns: the step is cached,
see smol.workflow.step_cache), cache (true: cached without files; false:
never), description. Anything else is an error that names the field.

ctx: every session method (exec, spawn, read_file, write_file,
create_dir_all, remove, create_temp_dir, stat, list_dir; the session opens
on first use), ctx:sh(cmd[, exec_opts]) (sh -c; a non-zero exit raises an
error naming the command, exit code and last lines of stderr; returns the
result), ctx:save_artifact(path[, name]) (copies out of the sandbox into
REPORT_DIR/artifacts/<instance>/<name>, returns the host path),
ctx.log(...), ctx:session(), ctx:skip(reason), and the fields inputs (the
needed steps' return values by step name; for a matrix step a table by
instance id), matrix, params, env, secrets, step, id, attempt, report_dir.

Semantics: a step runs when all its needs succeeded (or failed with
continue_on_error). A failure (an error raised, ctx:sh's non-zero exit, a
timeout) skips its dependents and cancels the running steps (their
processes are killed) and those not started, unless keep_going; `always`
steps run once their needs ended, whatever the outcome, also after Ctrl-C
(for a grace period; see smol.workflow.runner). A matrix instance needing
a matrix step waits for the instances agreeing on their shared keys only.
A timeout also stops Lua code that never yields. The retry predicate
receives {status, attempt, message, exit_code, timed_out, stderr, error}.

wf.run(def, opts) runs one and returns the run table of the contract's
"Workflow run data model"; `smolwf run FILE` is the CLI (smol.cli.run).
Beyond the contract: what each session really got, from its capabilities,
{profile (asked for), provider_profile (as the provider names it, if it
does), isolation ("namespaces", "none", "unknown"), network (bool or nil),
program, key ("workflow" or "step:<id>")} is in run.sessions (every one),
run.sandbox (the shared session) and inst.sandbox (the step's); observers
may have session_opened(run, info). Messages carry no status prefix
(inst.error = "interrupted", "needs 'build', which failed"): the status is
beside them. The default report root (.smolwf) holds a CACHEDIR.TAG.
]]
local validate = require "smol.workflow.validate"
local plan = require "smol.workflow.plan"

local wf = {}

local DEFAULT_JOBS = 4
local REPORT_WRITERS = { "smol.workflow.report_json", "smol.workflow.report_junit",
  "smol.workflow.report_html" }

-- Definitions that went through define(), so run() need not check again.
local defined = setmetatable({}, { __mode = "k" })

-- Validates a workflow definition and returns it; raises the
-- invalid_workflow error (code, message, problems) naming every problem.
function wf.define(def)
  plan.check(validate.check(def))
  defined[def] = true
  return def
end

function wf.is_workflow(v)
  return type(v) == "table" and (defined[v] or false)
end

wf.is_invalid = validate.is_invalid

-- The steps and their dependencies as a tree (what `smolwf run --list` prints).
function wf.tree(def)
  return plan.tree(plan.check(validate.check(def)))
end

-- The instances a run would have, in the order they can run (matrix expanded,
-- --step selection applied). Raises invalid_workflow for an unknown step.
function wf.instances(def, steps)
  local instances = plan.instances(defined[def] and def or plan.check(validate.check(def)))
  if steps and #steps > 0 then
    local selected, err = plan.select(instances, steps)
    if not selected then error(validate.new_error(def.name, { err }), 0) end
    instances = selected
  end
  return instances
end

local runs = require "smol.workflow.runs"
wf.tag_report_root = function(root) runs.tag(root, "workflow reports") end

-- The parameters a workflow that declares `params` takes: those and its
-- secrets' (`{param = "key"}`); nil when it declares none (then any goes).
local function declared_params(def)
  if def.params == nil then return nil end
  local names = {}
  for k in pairs(def.params) do names[#names + 1] = tostring(k) end
  for _, spec in pairs(def.secrets or {}) do
    if type(spec) == "table" and spec.param then names[#names + 1] = spec.param end
  end
  table.sort(names)
  return names
end

local Setup = { __tostring = function(e) return e.message end }

-- A misspelled --param would run silently with the default: refused, as a
-- setup error naming it, with the parameter it most likely meant.
local function check_params(def, params)
  local names = declared_params(def)
  if names == nil then return end
  local known = {}
  for _, name in ipairs(names) do known[name] = true end
  local given = {}
  for k in pairs(params or {}) do given[#given + 1] = tostring(k) end
  table.sort(given)   -- the same one named first every time
  for _, k in ipairs(given) do
    if not known[k] then
      local hint = validate.closest(tostring(k), names)
      local why = hint and ("did you mean '%s'?"):format(hint)
        or ("its parameters: " .. (#names > 0 and table.concat(names, ", ") or "none"))
      error(setmetatable({ code = "setup",
        message = ("--param %s: the workflow has no such parameter (%s)"):format(k, why) }, Setup), 0)
    end
  end
end

local function merged_params(def, params)
  check_params(def, params)
  local out = {}
  for k, v in pairs(def.params or {}) do out[k] = v end
  for k, v in pairs(params or {}) do out[k] = v end
  return out
end

-- The secrets of a run of `def` with --param `params` (see
-- smol.workflow.secrets): their values, and the masker that hides them.
-- Raises a setup error naming a missing or too short one.
function wf.secrets(def, params)
  return require("smol.workflow.secrets").resolve(def, merged_params(def, params))
end

local function new_run(def, opts, secrets)
  local files = require "smol.workflow.files"
  local fs = require "smol.fs"
  local core = require "smol.core"
  local instances, defs, taken = wf.instances(def, opts.steps), {}, {}
  for _, inst in ipairs(instances) do
    defs[inst.id] = inst.def
    inst.def = nil  -- the run table is data for writers (inst.value holds what the step returned)
    -- Distinct ids can sanitize to one name ("a/b", "a_b"): keep log names unique.
    local base = "logs/" .. files.safe_name(inst.id)
    while taken[base] do base = base .. "_" end
    taken[base] = true
    inst.logs = { stdout = base .. ".stdout.log", stderr = base .. ".stderr.log" }
  end
  local ok, report_dir = pcall(function()
    local dir = opts.report_dir or runs.new_dir()
    -- logs/ is needed anyway; making it now also proves the directory is
    -- writable before anything runs (else every report would fail at the end).
    fs.mkdir_p(opts.reports == false and dir or (dir .. "/logs"))
    return dir
  end)
  if not ok then
    error(setmetatable({ code = "setup", message = "cannot make the report directory: "
      .. tostring(report_dir) }, { __tostring = function(e) return e.message end }), 0)
  end
  return {
    name = def.name or opts.name or "workflow", started_at = core.time(), result = nil,
    report_dir = report_dir, hostname = core.hostname(),
    params = require("smol.workflow.secrets").shown_params(merged_params(def, opts.params), secrets),
    jobs = opts.jobs or def.jobs or DEFAULT_JOBS, instances = instances, sessions = {},
  }, defs
end

local function report_observers(opts, run)
  local observers = {}
  if opts.reports ~= false then
    observers[#observers + 1] = require("smol.workflow.logs").new { report_dir = run.report_dir, cap = opts.log_cap }
  end
  for _, obs in ipairs(opts.observers or {}) do observers[#observers + 1] = obs end
  return observers
end

-- Writes report.json, junit.xml, report.html (and resume.json, for a
-- later --resume); `masker` (smol.workflow.mask) hides the secrets in what
-- they write.
function wf.write_reports(run, masker)
  local ok, err = pcall(require("smol.workflow.resume").write, run, masker)
  if not ok then io.stderr:write(("smolwf: writing %s failed: %s\n"):format("resume.json", tostring(err))) end
  for _, name in ipairs(REPORT_WRITERS) do
    ok, err = pcall(function() require(name).write(run, { mask = masker }) end)
    -- One broken writer must not cost the user the other reports.
    if not ok then io.stderr:write(("smolwf: %s failed: %s\n"):format(name, tostring(err))) end
  end
end

-- Records what a session really got (profile, isolation, network): in
-- run.sessions (every one, with its key: "workflow" or "step:<id>") and
-- run.sandbox (the workflow's shared session); observers with a
-- session_opened(run, info) method hear of it.
local function record_session(S, run, key, info)
  local entry = {}
  for k, v in pairs(info) do entry[k] = v end
  entry.key = key
  run.sessions[#run.sessions + 1] = entry
  -- (on a pool, one shared session per provider: the first stands for them)
  if key == "workflow" or (key:match("^workflow@") and not run.sandbox) then run.sandbox = entry end
  require("smol.workflow.observe").notify(S, "session_opened", entry)
end

-- What a resumed run reuses of the run in `dir` (smol.workflow.resume).
local function plan_resume(S, run, dir)
  local resume = require "smol.workflow.resume"
  local state = resume.load(dir)
  S.reuse = resume.plan(run.instances, state, function(inst, key)
    if S.defs[inst.id].outputs == nil then return true end
    return key ~= nil and S.cache ~= nil and S.cache:lookup(key) ~= nil
  end)
  run.resumed_from = dir
end

-- Whether a step of the run can use the step cache: a run without one
-- never loads the cache's modules.
local function any_cacheable(defs)
  for _, def in pairs(defs) do
    if plan.cacheable(def) then return true end
  end
  return false
end

-- Keeps the step cache under its size cap (least recently used entries
-- go first; those this run used stay), once a run stored something.
local function evict(S, cap)
  if next(S.used_keys) == nil then return end
  local ok, removed, freed = pcall(S.cache.evict, S.cache, cap, S.used_keys)
  if not ok then S.warn("the step cache could not evict old entries: " .. tostring(removed)) return end
  S.run.cache_evicted = removed > 0 and { entries = removed, bytes = freed } or nil
end

--[[
Runs a workflow; returns the run table (see the contract's data model).
opts (all optional):
  jobs        concurrency cap (overrides def.jobs)
  steps       list of step names or instance ids: run those and what they need
  name        the run's name when the workflow has none (the CLI: the file name)
  params      table merged over def.params, as ctx.params
  keep_going  a failure does not cancel independent steps
  report_dir  default .smolwf/runs/<timestamp>
  observers   list of observer tables (progress, events...)
  warn        function(message) for problems that do not stop the run
              (a failing observer, a session that would not close); default stderr
  reports     false: no log files and no report files
  open        function(sandbox_spec) -> session (default smol.sandbox.open)
  grace       seconds the `always` steps get after Ctrl-C, TERM or HUP (default 30)
  profile     the profile of every session (overrides the workflow's and the steps')
  cache       false: no step cache at all
  cache_dir   the step cache's directory (default .smolwf/cache)
  cache_read  false: look nothing up (every step runs), still store (--no-cache)
  cache_cap   bytes the cache may hold (default 2 GiB; LRU eviction after the run)
  keep_runs   runs kept in .smolwf/runs when report_dir is the default (20)
  log_cap     bytes kept of each step's stdout and stderr log (the tail; 64 MiB)
  resume      a report directory: reuse what succeeded in that run (see smol.workflow.resume)
  explain     set of step names or instance ids whose cache decision on_explain hears
  on_explain  function(inst, lines): why the step ran or was cached
  on_abort    function(run) called when the run is cut short (an error out of
              the engine, os.exit, an interrupt the runner could not catch): at
              exit, after the run was completed and its reports written
]]
function wf.run(def, opts)
  opts = opts or {}
  if not defined[def] then wf.define(def) end
  local runner = require "smol.workflow.runner"
  local sessions = require "smol.workflow.sessions"
  local secrets = opts.secrets or wf.secrets(def, opts.params)
  local run, defs = new_run(def, opts, secrets)
  local S = runner.new_state(run, { observers = report_observers(opts, run),
    keep_going = opts.keep_going, warn = opts.warn, grace = opts.grace })
  S.defs, S.sandbox = defs, def.sandbox or {}
  S.params, S.secrets, S.masker = merged_params(def, opts.params), secrets.values, secrets.masker
  S.secret_params, S.profile = secrets.params, opts.profile
  S.cache_keys, S.used_keys = {}, {}
  S.cache_off = opts.cache == false
  if not S.cache_off and (opts.resume or any_cacheable(defs)) then
    S.cache = require("smol.workflow.cache").open(opts.cache_dir or require("smol.workflow.cache").DEFAULT_DIR)
    S.cache_read = opts.cache_read ~= false
  end
  S.explain, S.on_explain = opts.explain, opts.on_explain
  if opts.resume then plan_resume(S, run, opts.resume) end
  S.base_env = {}
  for k, v in pairs(secrets.values) do S.base_env[k] = v end
  for k, v in pairs(def.env or {}) do S.base_env[k] = v end
  local warn = S.warn
  S.warn = function(message) warn(secrets.masker:text(message)) end
  local placement = require "smol.workflow.placement"
  placement.start(S)
  -- a pool places every step: as many at once as it has slots, unless told
  if S.pool and not opts.jobs and not def.jobs then run.jobs = S.pool:total_slots() end
  S.sessions = sessions.new(placement.opener(S, opts.open or require("smol.sandbox").open))
  S.sessions.on_open = function(session, key, info)
    runner.ensure_exit_hook("session")
    if S.pool then info.placement = S.pool:placement(session) end
    record_session(S, run, key, info)
  end
  -- Reports as they stand at Ctrl-C (written again at the end), in case
  -- whatever sent the signal does not wait for the `always` steps.
  S.on_interrupt = function()
    if opts.reports ~= false then wf.write_reports(run, secrets.masker) end
  end
  S.on_abort = function()
    if opts.reports ~= false then wf.write_reports(run, secrets.masker) end
    if opts.on_abort then opts.on_abort(run) end
  end
  if not opts.report_dir and opts.reports ~= false then
    local ok, err = pcall(runs.prune, opts.keep_runs or runs.DEFAULT_KEEP, { run.report_dir, opts.resume })
    if not ok then S.warn("removing old runs failed: " .. tostring(err)) end
  end
  runner.drive(S)
  placement.stop(S)
  if S.cache then evict(S, opts.cache_cap or require("smol.workflow.cache").DEFAULT_CAP) end
  if opts.reports ~= false then wf.write_reports(run, secrets.masker) end
  return run
end

-- The exit status `smolwf run` gives for a finished run.
function wf.exit_code(run)
  return ({ success = 0, failure = 1, cancelled = 130, invalid = 2 })[run.result] or 1
end

return wf
