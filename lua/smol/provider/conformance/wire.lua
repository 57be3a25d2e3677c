-- The conformance kit's raw JSON Lines connection to one provider process.
--
-- Unlike smol.jsonl (the client everybody else uses), this one must be able
-- to send lines that are not valid requests, and it records everything the
-- provider does wrong instead of raising: replies for unknown or finished
-- ids, lines that are not JSON, events after a terminal line. Every wait has
-- a deadline, so a provider that hangs makes a check fail, never the kit.
--
-- Waiting drives the loop with core.run_once, so the kit runs outside any
-- smol.task task (the CLI and the specs call it from the main chunk).
local core = require "smol.core"
local fs = require "smol.fs"
local cjson = require "cjson"
local expect = require "smol.provider.conformance.expect"

local wire = {}
wire.__index = wire

local json = cjson.new()
json.decode_max_depth(64)          -- a provider's replies are shallow; {} encodes as an object

-- Default deadline for one request, in seconds.
wire.DEFAULT_TIMEOUT = 10
wire.STUCK_TIMEOUT = 2

local MAX_LINE = 256 * 1024 * 1024
local STDERR_TAIL = 40

-- Reads the kit's own environment (Lua cannot list it), so the provider can
-- be started with it plus a marker variable.
local function current_environment()
  local env = {}
  local data = fs.try_read_file("/proc/self/environ")
  if not data then return env end
  for entry in data:gmatch("([^%z]+)") do
    local k, v = entry:match("^([^=]+)=(.*)$")
    if k then env[k] = v end
  end
  return env
end

-- How often wait_until looks at its condition when no event comes.
wire.POLL = 0.02

--[[
Runs the loop until pred() is true or `seconds` passed; returns pred().
pred is checked after each loop turn, and a turn ends at least every
`poll` seconds (default wire.POLL) even when no event comes: a condition
on something outside the loop (/proc, files, the clock) is seen within
that time instead of at the deadline.
]]
function wire.wait_until(pred, seconds, poll)
  if pred() then return true end
  poll = poll or wire.POLL
  local expired = false
  local timer = core.timer(seconds, function() expired = true end)
  -- A new tick only once the last one fired: stopping an unfired timer
  -- leaves a close pending, which makes the next run_once return at once,
  -- so a tick per turn would spin the loop instead of sleeping in it.
  local tick, ticked = nil, true
  local ok, err = pcall(function()
    while not pred() and not expired do
      if ticked then
        ticked = false
        tick = core.timer(poll, function() ticked = true end)
      end
      core.run_once()
    end
  end)
  if tick then tick:stop() end
  timer:stop()
  if not ok then error(err, 0) end
  return pred()
end

function wire.sleep(seconds)
  local woke = false
  wire.wait_until(function() return woke end, seconds)
end

local function note_violation(self, what)
  self.violations[#self.violations + 1] = what
end

local function deliver(self, msg, line)
  local req = self.pending[msg.id]
  if not req then
    local done = self.finished[msg.id]
    local ok, id_text = pcall(json.encode, msg.id)
    note_violation(self, (done and "reply after the terminal line of id "
      or "reply for unknown id ") .. (ok and id_text or "?") .. ": " .. line:sub(1, 200))
    return
  end
  if msg.event ~= nil then
    if not req.discard_events then req.events[#req.events + 1] = msg.event end
    if req.on_event then req.on_event(msg.event) end
    return
  end
  req.result, req.error = msg.result, msg.error
  req.done, req.seq = true, self:next_seq()
  self.pending[msg.id], self.finished[msg.id] = nil, req
end

function wire:next_seq()
  self.seq = self.seq + 1
  return self.seq
end

-- A line's message, checked against "one JSON value, UTF-8, meaning
-- exactly what it says" (core.json_decode) in the same parse; or nil, the
-- problem and its kind. \u0000 is valid JSON (lua-cjson reads it, C
-- readers cut there), and an id beyond 2^53 may be an exact echo: on_line
-- sees to those.
local function decode_line(line)
  local msg, problem, kind = core.json_decode(line)
  if msg ~= nil or kind ~= "nul" then return msg, problem, kind end
  local ok, decoded = pcall(json.decode, line)
  return ok and decoded or nil, nil, "nul"
end

--[[
A line whose id lua-cjson cannot read exactly (a number from 2^53 on): the
check that sent such an id gets it through self.on_inexact_id(line);
anything else is a violation.
]]
local function inexact_id(self, line)
  if self.on_inexact_id then return self.on_inexact_id(line) end
  note_violation(self, "reply with an id no double holds exactly: " .. line:sub(1, 200))
end

--[[
An output frame's line (docs/protocol.md, "Output frames"): checked as
the host checks it, then its bytes are awaited (proc:expect_frame); they
come to on_frame, which delivers the event as its base64 line would be,
marked `framed`. A frame's line that breaks the rules is a violation, and
the stream cannot be followed after one whose count is not a byte count.
]]
local function frame_begins(self, msg, line)
  local ev, n = msg.event, msg.event.data_bytes
  local req = self.pending[msg.id]
  local why = (ev.type ~= "stdout" and ev.type ~= "stderr") and "an event that is not stdout or stderr"
    or ev.data_base64 ~= nil and "both data_bytes and data_base64"
    or (math.type(n) ~= "integer" or n < 0 or n > MAX_LINE) and "a data_bytes that is no byte count"
    or (req and not req.raw_output) and "a request that did not ask for raw_output"
    or #line >= 512 and "a line of 512 bytes or more"
  if why then note_violation(self, "output frame with " .. why .. ": " .. line:sub(1, 200)) end
  if math.type(n) ~= "integer" or n < 0 or n > MAX_LINE then return end
  ev.data_bytes, ev.framed = nil, true
  if n == 0 then
    ev.data_base64 = ""
    return deliver(self, msg, line)
  end
  self.frame = {msg = msg, line = line}
  self.proc:expect_frame(n)
end

function wire:on_frame(bytes)
  local f = self.frame
  self.frame = nil
  f.msg.event.data_base64 = core.b64encode(bytes)
  deliver(self, f.msg, f.line)
end

function wire:on_line(line)
  if line == "" then return end
  local msg, problem, kind = decode_line(line)
  if kind == "id" then return inexact_id(self, line) end
  if problem then
    return note_violation(self, "line is not one valid UTF-8 JSON object (" .. problem .. "): "
      .. expect.show(line:sub(1, 200)))
  end
  if type(msg) ~= "table" then
    note_violation(self, "line is not a JSON object: " .. line:sub(1, 200))
  elseif msg.id == cjson.null or msg.id == nil then
    msg.seq = self:next_seq()
    self.null_replies[#self.null_replies + 1] = msg
  elseif msg.result == nil and msg.error == nil and msg.event == nil then
    note_violation(self, "line has none of result, error, event: " .. line:sub(1, 200))
  elseif type(msg.event) == "table" and msg.event.data_bytes ~= nil then
    frame_begins(self, msg, line)
  else
    deliver(self, msg, line)
  end
end

local function fail_pending(self, why)
  for id, req in pairs(self.pending) do
    req.done, req.lost = true, why
    self.pending[id], self.finished[id] = nil, req
  end
end

local function on_stderr(self, line)
  if not line then return end
  local tail = self.stderr_tail
  tail[#tail + 1] = line
  if #tail > STDERR_TAIL then table.remove(tail, 1) end
  if self.stderr_sink then self.stderr_sink(line) end
end

local function spawn_options(self, argv, env)
  return {
    file = argv[1], args = argv, env = env, stdin = true,
    stdout = "lines", stderr = "lines", max_line = MAX_LINE,
    process_group = true,
    on_stdout = function(line, err, frame)
      if frame then return self:on_frame(line) end
      if line then return self:on_line(line) end
      if err then note_violation(self, "provider stdout: " .. err) end
    end,
    on_stderr = function(line) on_stderr(self, line) end,
    on_exit = function(code, signal)
      self.exit_code, self.exit_signal, self.exited = code, signal, true
      if not self.ending then   -- nobody asked it to: it crashed or gave up
        note_violation(self, "provider exited unasked (" .. self:exit_status() .. ")")
      end
      fail_pending(self, "provider exited (" .. self:exit_status() .. ")")
    end,
  }
end

--[[
Starts `argv` (the provider program, its arguments and "serve") with the
kit's environment plus opts.env_extra. opts.stderr_sink(line) sees the
provider's stderr. Returns the connection, or nil and a message.
]]
function wire.start(argv, opts)
  opts = opts or {}
  local env = current_environment()
  for k, v in pairs(opts.env_extra or {}) do env[k] = v end
  local self = setmetatable({
    argv = argv, next_id = 0, seq = 0, pending = {}, finished = {},
    null_replies = {}, violations = {}, stderr_tail = {},
    stderr_sink = opts.stderr_sink,
  }, wire)
  local proc, err = core.spawn(spawn_options(self, argv, env))
  if not proc then
    return nil, "cannot start provider `" .. argv[1] .. "`: " .. tostring(err)
  end
  self.proc, self.pid = proc, proc.pid
  return self
end

function wire:exit_status()
  if not self.exited then return "running" end
  if self.exit_signal then return "killed by SIG" .. self.exit_signal end
  return "exit code " .. tostring(self.exit_code)
end

-- Sends one raw line (a "\n" is added). False when the provider's stdin is gone.
function wire:send_raw(line)
  if self.exited then return false end
  return (pcall(self.proc.write, self.proc, line .. "\n"))
end

--[[
Sends a raw line and waits (at most `seconds`, default 5) for the next
id-null reply, or for a reply the wire could not place or read (a provider
echoing back an id it should refuse, a line that is not valid JSON).
Returns the id-null reply, or nil and what came instead.
]]
function wire:null_reply_to(line, seconds)
  local replies, strays = self.null_replies, self.violations
  local before, strays_before = #replies, #strays
  if not self:send_raw(line) then return nil, "provider " .. self:exit_status() end
  wire.wait_until(function()
    return #replies > before or #strays > strays_before or self.exited
  end, seconds or 5)
  return replies[before + 1], strays[strays_before + 1]
end

-- Registers a record for replies with `id` to a line the caller sends raw.
function wire:track(id, method, on_event)
  local req = {id = id, method = method, events = {}, on_event = on_event}
  self.pending[id] = req
  return req
end

--[[
Sends a request and returns its record without waiting: {id, method,
events = {...}, done, result, error, lost (why it never got a reply: the
provider exited or its stdin closed), seq}. opts.id picks the id
(any JSON value), opts.on_event(ev) sees events as they arrive, and
opts.discard_events keeps them out of req.events (for long streams).
]]
function wire:send(method, params, opts)
  opts = opts or {}
  local id = opts.id
  if id == nil then
    self.next_id = self.next_id + 1
    id = self.next_id
  end
  if method == "shutdown" then self.ending = true end
  local line = json.encode({id = id, method = method, params = params or {}})
  local req = self:send_line(id, method, line, opts.on_event)
  req.discard_events = opts.discard_events
  req.raw_output = type(params) == "table" and params.raw_output == true   -- frames allowed (on_line)
  return req
end

-- Sends a raw line the caller made, expecting replies with `id`; returns the record.
function wire:send_line(id, method, line, on_event)
  local req = self:track(id, method, on_event)
  if not self:send_raw(line) then
    self.pending[id] = nil
    req.done, req.lost = true, "provider stdin is closed (" .. self:exit_status() .. ")"
  end
  return req
end

-- Waits for req's terminal line; false when the deadline passed first
-- (req.waited then says how long; a late reply still completes it).
--
-- Once a request went unanswered, the provider is likely stuck behind it:
-- later default waits on this connection are cut to STUCK_TIMEOUT, so a
-- wedged provider fails its remaining checks quickly.
function wire:wait(req, seconds)
  seconds = seconds or (self.stuck and wire.STUCK_TIMEOUT or wire.DEFAULT_TIMEOUT)
  local done = wire.wait_until(function() return req.done end, seconds)
  if not done then
    req.waited = (req.waited or 0) + seconds
    self.stuck = true
  end
  return done
end

-- send + wait (opts.timeout in seconds). The record says what came back.
function wire:call(method, params, opts)
  local req = self:send(method, params, opts)
  self:wait(req, opts and opts.timeout)
  return req
end

function wire:wait_exit(seconds)
  return wire.wait_until(function() return self.exited end, seconds)
end

function wire:close_stdin()
  self.ending = true
  if self.proc then self.proc:close_stdin() end
end

--[[
Ends the provider: shutdown (when it still runs), then end of input, then
KILL to its process group if it has not exited within `grace` seconds.
Returns true when it exited by itself.
]]
function wire:stop(grace)
  grace = grace or 3
  if not self.exited then
    self:send("shutdown", {})
    self:close_stdin()
  end
  local clean = self:wait_exit(grace)
  if not clean then
    self.ending = true
    self.proc:kill("KILL")
    self:wait_exit(grace)
  end
  self.proc:close()
  return clean
end

wire.json = json
wire.null = cjson.null

return wire
