-- Workflow observer that keeps every step instance's full stdout and stderr
-- in log files in the report directory: logs/<id>.stdout.log and
-- logs/<id>.stderr.log (relative to run.report_dir, as inst.logs says).
--
-- A stream's file is created at its first byte, so a step that prints
-- nothing costs no file (creating files is the slow part of a run of many
-- small steps), and closed when the instance finishes (or when the run
-- finishes, for instances cut short). Each attempt after the first starts
-- with a marker line in every stream it writes, so the log shows the
-- attempts in order. ctx.log messages and retry notes go to the stderr log,
-- marked "[log]" and "[retry]", next to the output they explain.
--
-- A stream's log keeps at most `cap` bytes (64 MiB by default): past it,
-- the oldest output is dropped and the tail kept (what explains a failure
-- is at the end). The file then starts with a line saying how much was
-- dropped, and inst.log_dropped[stream] says it for the reports. The file
-- is cut each time it reaches twice the cap, so the copying costs at most
-- as much again as the writing.
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

M.DEFAULT_CAP = 64 * 1024 * 1024

local function open_log(path, cap)
  local f, err = io.open(path, "wb")
  if not f then error(string.format("report: cannot write step log `%s`: %s", path, err), 0) end
  return {file = f, path = path, cap = cap, content = 0, dropped = 0, header = 0, at_line_start = true}
end

local function fail_log(log, err)
  error(string.format("report: cannot cut step log `%s`: %s", log.path, tostring(err)), 0)
end

-- Keeps the last `cap` bytes of the log, after a line saying how many
-- were dropped so far.
local function cut(log)
  log.file:close()
  local f, err = io.open(log.path, "rb")
  if not f then fail_log(log, err) end
  f:seek("set", log.header + log.content - log.cap)
  local tail = f:read(log.cap) or ""
  f:close()
  log.dropped = log.dropped + log.content - #tail
  local header = string.format("[smolwf: the first %d bytes of this log were dropped; it keeps the last %d]\n",
    log.dropped, log.cap)
  log.file, err = io.open(log.path, "wb")
  if not log.file then fail_log(log, err) end
  log.file:write(header, tail)
  log.header, log.content = #header, #tail
end

-- Writes data, remembering whether it ended a line.
local function write(log, data)
  if #data == 0 then return end
  log.file:write(data)
  log.content = log.content + #data
  log.at_line_start = data:sub(-1) == "\n"
  if log.content >= 2 * log.cap then cut(log) end
end

-- A line of our own (attempt marker, ctx.log) always starts on a fresh line.
local function write_line(log, line)
  if not log.at_line_start then write(log, "\n") end
  write(log, line .. "\n")
end

local function attempt_marker(n)
  return string.format("----- attempt %d -----", n)
end

local Observer = {}
Observer.__index = Observer

function Observer:run_started(run)
  self.report_dir = run.report_dir
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

-- The open log of one stream of a started instance, created on first use.
function Observer:log_of(inst, stream)
  local state = self.open[inst]
  if not state then return nil end
  local log = state[stream]
  if not log then
    local rel = self:log_paths(inst)[stream]
    log = open_log(reportdir.join(self.report_dir, rel), self.cap)
    state[stream] = log
    -- Its first bytes come from a later attempt: say which.
    if state.attempt > 1 then write_line(log, attempt_marker(state.attempt)) end
  end
  return log
end

function Observer:step_started(_, inst, attempt_no)
  attempt_no = attempt_no or 1
  local state = self.open[inst]
  if not state then
    self.open[inst] = {attempt = attempt_no}
    return
  end
  state.attempt = attempt_no
  for _, stream in ipairs(STREAMS) do
    if state[stream] then write_line(state[stream], attempt_marker(attempt_no)) end
  end
end

function Observer:step_output(_, inst, stream, chunk)
  if #chunk == 0 then return end
  local log = self:log_of(inst, stream)
  if log then write(log, chunk) end
end

function Observer:step_log(_, inst, message)
  local log = self:log_of(inst, "stderr")
  if log then write_line(log, "[log] " .. tostring(message)) end
end

function Observer:step_retry(_, inst, attempt_no, delay, err)
  local _ = attempt_no   -- the next step_started writes the "attempt N" marker
  local log = self:log_of(inst, "stderr")
  if log then write_line(log, string.format("[retry] retrying in %.3gs after: %s", delay or 0, tostring(err))) end
end

function Observer:close(inst)
  local state = self.open[inst]
  if not state then return end
  self.open[inst] = nil
  for _, stream in ipairs(STREAMS) do
    local log = state[stream]
    if log then
      if log.content > log.cap then cut(log) end
      log.file:close()
      if log.dropped > 0 then
        inst.log_dropped = inst.log_dropped or {}
        inst.log_dropped[stream] = log.dropped
      end
    end
  end
end

function Observer:step_finished(_, inst)
  self:close(inst)
end

function Observer:run_finished()
  for inst in pairs(self.open) do self:close(inst) end
end

--- A new log observer. opts.cap: bytes kept per stream (default M.DEFAULT_CAP).
function M.new(opts)
  return setmetatable({open = {}, taken = {}, cap = opts and opts.cap or M.DEFAULT_CAP}, Observer)
end

return M
