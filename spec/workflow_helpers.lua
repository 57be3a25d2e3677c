-- Shared helpers of the workflow specs (not a spec itself).
local fs = require "smol.fs"

local M = {}

-- A fresh directory name under /tmp; removed by cleanup().
local created = {}
function M.temp_dir()
  local dir = os.tmpname()
  os.remove(dir)
  created[#created + 1] = dir
  return dir
end

function M.cleanup()
  for _, dir in ipairs(created) do fs.remove_tree(dir) end
  created = {}
end

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

-- Waits for cond() to hold, polling, for at most `seconds`; returns cond's value.
function M.wait_until(cond, seconds)
  local task, core = require "smol.task", require "smol.core"
  local deadline = core.now() + (seconds or 5)
  repeat
    local v = cond()
    if v then return v end
    task.sleep(0.02)
  until core.now() > deadline
  return cond()
end

-- The pid a step's shell wrote to `path` (waits until it is complete).
function M.read_pid(path, seconds)
  return M.wait_until(function() return tonumber(M.read(path) or "") end, seconds)
end

-- True while the process `pid` exists and is not a zombie.
function M.alive(pid)
  local stat = M.read("/proc/" .. tostring(pid) .. "/stat")
  return stat ~= nil and not stat:match("^%d+ %b() Z")
end

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
