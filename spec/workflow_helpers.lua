-- Shared helpers of the workflow specs (not a spec itself).
local fs = require "smol.fs"
local helpers = dofile("spec/fixtures/helpers.lua")

local M = {}

-- A fresh path under $TMPDIR that does not exist yet (for a report
-- directory or a pid file the test makes); removed by cleanup().
function M.temp_dir()
  return helpers.tempdir() .. "/new"
end

M.cleanup = helpers.cleanup

-- The file's content, or nil when it is not there (yet).
M.read = fs.try_read_file

function M.find(run, id)
  for _, inst in ipairs(run.instances) do if inst.id == id then return inst end end
  error("no instance " .. id)
end

function M.statuses(run)
  local out = {}
  for _, inst in ipairs(run.instances) do out[inst.id] = inst.status end
  return out
end

M.wait_until = helpers.wait_until

-- The pid a step's shell wrote to `path` (waits until it is complete).
function M.read_pid(path, seconds)
  return M.wait_until(function() return tonumber(M.read(path) or "") end, seconds)
end

M.alive = helpers.alive

-- Runs `smolwf ARGS...` (this very host binary) to completion.
-- opts: cwd, env, on_started(proc). Returns {code, signal, stdout, stderr}.
function M.smolwf(args, opts)
  opts = opts or {}
  local core, task = require "smol.core", require "smol.task"
  local exe = core.exe_path()
  local out, err, done = {}, {}, task.event()
  local proc = assert(core.spawn {
    file = exe, args = { exe, table.unpack(args) }, cwd = opts.cwd, env = opts.env,
    stdout = "chunks", stderr = "chunks",
    on_stdout = function(d) if d then out[#out + 1] = d end end,
    on_stderr = function(d) if d then err[#err + 1] = d end end,
    on_exit = function(code, signal) done:set(code, signal) end,
  })
  if opts.on_started then opts.on_started(proc) end
  local code, signal = done:wait()
  proc:close()
  return { code = code, signal = signal, stdout = table.concat(out), stderr = table.concat(err) }
end

return M
