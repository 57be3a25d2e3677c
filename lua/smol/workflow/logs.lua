-- Workflow observer that keeps every step instance's full stdout and stderr
-- in log files in the report directory: logs/<id>.stdout.log and
-- logs/<id>.stderr.log (relative to run.report_dir, as inst.logs says).
--
-- Files open when an instance starts its first attempt and close when it
-- finishes (or when the run finishes, for instances cut short). A retry
-- appends a marker line, so the log shows every attempt in order. ctx.log
-- messages go to the stderr log, marked "[log]", next to the output they
-- explain.
local reportdir = require "smol.workflow.reportdir"

local M = {}
local STREAMS = {"stdout", "stderr"}

--- The log path (relative to the report dir) of an instance's stream.
--- Ids like "test[shard=2]" stay readable; anything that could escape the
--- logs/ folder or confuse a shell becomes "_".
function M.path_for(id, stream)
  local safe = tostring(id):gsub("[^%w%._%-%[%]=,+]", "_"):gsub("^%.", "_")
  return "logs/" .. safe .. "." .. stream .. ".log"
end

-- One open log file: its handle and whether the last byte written ended a line.
local function open_log(path, mode)
  local f, err = io.open(path, mode)
  if not f then error(string.format("report: cannot write step log `%s`: %s", path, err), 0) end
  return {file = f, at_line_start = true}
end

local function write(log, data)
  if #data == 0 then return end
  log.file:write(data)
  log.at_line_start = data:sub(-1) == "\n"
end

-- A line of our own (retry marker, ctx.log) always starts on a fresh line.
local function write_line(log, line)
  if not log.at_line_start then write(log, "\n") end
  write(log, line .. "\n")
end

local Observer = {}
Observer.__index = Observer

function Observer:run_started(run)
  reportdir.ensure_dir(reportdir.join(run.report_dir, "logs"))
end

-- Fills inst.logs when the engine did not, keeping names unique in this run.
function Observer:log_paths(inst)
  if inst.logs then return inst.logs end
  local name = tostring(inst.id)
  while self.taken[M.path_for(name, "stdout")] do name = name .. "_" end
  local paths = {}
  for _, stream in ipairs(STREAMS) do
    paths[stream] = M.path_for(name, stream)
    self.taken[paths[stream]] = true
  end
  inst.logs = paths
  return paths
end

function Observer:step_started(run, inst, attempt_no)
  local open = self.open[inst]
  if not open then
    local paths = self:log_paths(inst)
    open = {}
    for _, stream in ipairs(STREAMS) do
      open[stream] = open_log(reportdir.join(run.report_dir, paths[stream]), "wb")
    end
    self.open[inst] = open
  end
  if attempt_no and attempt_no > 1 then
    for _, stream in ipairs(STREAMS) do
      write_line(open[stream], string.format("----- attempt %d -----", attempt_no))
    end
  end
end

function Observer:step_output(_, inst, stream, chunk)
  local open = self.open[inst]
  if open and open[stream] then write(open[stream], chunk) end
end

function Observer:step_log(_, inst, message)
  local open = self.open[inst]
  if open then write_line(open.stderr, "[log] " .. tostring(message)) end
end

function Observer:step_retry(_, inst, attempt_no, delay, err)
  local open = self.open[inst]
  if not open then return end
  -- The next step_started writes the "attempt N" marker; this says why.
  local _ = attempt_no
  write_line(open.stderr, string.format("[retry] %s; retrying in %.3gs", tostring(err), delay or 0))
end

function Observer:close(inst)
  local open = self.open[inst]
  if not open then return end
  self.open[inst] = nil
  for _, stream in ipairs(STREAMS) do open[stream].file:close() end
end

function Observer:step_finished(_, inst)
  self:close(inst)
end

function Observer:run_finished()
  for inst in pairs(self.open) do self:close(inst) end
end

--- A new log observer. opts is accepted for symmetry with the other observers.
function M.new(opts)
  local _ = opts
  return setmetatable({open = {}, taken = {}}, Observer)
end

return M
