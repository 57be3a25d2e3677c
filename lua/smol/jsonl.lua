--[[
smol.jsonl: one connection to a provider process speaking JSON Lines
(docs/protocol.md, its transport).

  local conn = jsonl.start(program, {max_line_bytes = N, max_depth = N})
  local result = conn:request("read_file", params, on_event, {timeout = 5, on_late = fn})
  conn:notify("kill", params)       -- fire and forget: the reply is dropped
  conn:shutdown(grace)              -- `shutdown`, then wait for the exit
  conn:give_up(err, because)        -- stop using it: TERM, KILL after a grace;
                                    -- pending requests fail with err
  conn:alive(), conn:in_use(), conn.pid, conn.program, conn.exit_code, conn:wait_exit()
  local remove = jsonl.observe(fn)  -- fn(direction, info, line) for every line
                                    -- ("send"/"recv"), fn("exit", info, status, signal, crashed);
                                    -- remove() unregisters just this fn

`program` is a path or name (started as `PROGRAM serve`) or an argv list
({"ssh", "box", "smolwf-provider"}, started with "serve" appended).

The wire itself (writing requests, reading, decoding and routing replies
to their request's queue) is the host's smol.conn (host/smolwf/conn.h);
this module keeps what replies and failures mean: a request's events reach
`on_event` in the waiting task's own context, in order, and `on_event` may
itself wait.

Faults:
  - a line that is not a JSON object, nested deeper than max_depth, longer
    than max_line_bytes, a reply for an id never sent or with a null id:
    the connection is broken and the provider terminated; every pending
    request then fails with a "protocol" error naming what was wrong
    (or provider_exited, when the provider died on its own: see
    break_connection).
  - the provider exits: every pending request fails with "provider_exited"
    naming the program and how it ended.
  Either error carries the provider's last stderr lines (its own
  explanation, e.g. a bad profiles file) in its `stderr` field and at the
  end of its message. A provider's stderr is not printed as it comes:
  opts.on_stderr(line) (jsonl.start) gets each line when given.
  - a request whose waiter gives up (cancelled, on_event raised, timeout)
    is "abandoned": its later lines are dropped until its terminal line.
]]

local cjson = require "cjson"
local cjson_safe = require "cjson.safe"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"

local jsonl = {}
local has_reply = core.has_reply
local wait_until = task.wait_until

jsonl.DEFAULT_MAX_LINE = 256 * 1024 * 1024
jsonl.DEFAULT_MAX_DEPTH = 128
-- How long a provider that closed its stdout or broke the protocol may
-- take to exit before it is killed.
local EXIT_GRACE = 2
-- How long a provider's output may stay open after it exited (see connect).
jsonl.EXIT_DRAIN = 1

-- See jsonl.observe. Replaced, never changed in place, so an observer
-- that removes itself (or adds another) does not disturb the loop
-- notifying the current ones.
local observers = {}
local connections = 0   -- connection numbers, for observers and names
local running = setmetatable({}, {__mode = "k"})  -- connections to tell about observers
local substitute = nil  -- see jsonl.substitute

local Conn = {}
Conn.__index = Conn

-- A copy of list without entry.
local function without(list, entry)
  local rest = {}
  for _, e in ipairs(list) do
    if e ~= entry then rest[#rest + 1] = e end
  end
  return rest
end

local function notify_observers(conn, direction, what, signal, crashed)
  local list = observers
  for i = 1, #list do list[i].fn(direction, conn.info, what, signal, crashed) end
end

-- The host calls a connection's line observer only while some observer
-- is registered: the lines are decoded the same way either way.
local function update_observing(conn)
  if observers[1] ~= nil and conn.state == "running" then
    conn.c:observe(function(direction, line) notify_observers(conn, direction, line) end)
  elseif conn.state ~= "exited" then
    conn.c:observe(nil)
  end
end

local function set_observers(list)
  observers = list
  for conn in pairs(running) do update_observing(conn) end
end

--[[
Registers fn(direction, info, line), called for every line sent ("send")
or received ("recv") on any connection, and fn("exit", info, status,
signal, crashed) when a provider exits (signal: its name, e.g. "KILL",
when a signal ended it; crashed: true when it ended while in use, not
after our shutdown nor once we gave up on it); observers are called in
the order they were added and must not yield. Returns a function that
removes this registration (idempotent): several observers (a recorder, a
test) coexist. jsonl.observe(nil) removes every observer; that is for
test cleanup, library code calls its remover.
]]
function jsonl.observe(fn)
  if fn == nil then
    set_observers({})
    return function() end
  end
  if type(fn) ~= "function" then
    error("bad argument #1 to 'jsonl.observe' (function or nil expected, got " .. type(fn) .. ")", 2)
  end
  local entry = {fn = fn}  -- its own identity: the same fn may be registered twice
  local list = {table.unpack(observers)}
  list[#list + 1] = entry
  set_observers(list)
  return function() set_observers(without(observers, entry)) end
end

--[[
Makes every connection started from now on run fn(program) instead of
program (fn returns a program: a path or an argv list); jsonl.substitute(nil)
ends that. For `--replay`, which puts a replay provider in the place of
every provider.
]]
function jsonl.substitute(fn)
  if fn ~= nil and type(fn) ~= "function" then
    error("bad argument #1 to 'jsonl.substitute' (function or nil expected, got " .. type(fn) .. ")", 2)
  end
  substitute = fn
end

local function basename(path)
  return (tostring(path):match("([^/]+)/*$")) or tostring(path)
end

--[[
A program's argv without the "serve" the host adds: {program} for a path
or name, a copy of an argv list. Misuse raises at level (the caller's caller).
]]
function jsonl.argv(program, level)
  level = (level or 1) + 1
  if type(program) == "string" then
    if program == "" then error("provider program must not be empty", level) end
    return {program}
  end
  if type(program) ~= "table" or program[1] == nil then
    error(("provider program must be a path or a non-empty argv list, got %s"):format(type(program)), level)
  end
  local argv = {}
  for i, word in ipairs(program) do
    if type(word) ~= "string" then
      error(("provider program argv[%d] must be a string, got %s"):format(i, type(word)), level)
    end
    argv[i] = word
  end
  return argv
end

--[[
How messages name a provider program: the bundled one by its name,
`smolwf-provider`, since its path (a build or install directory) is long
and would push the cause of an error out of a narrow column; an argv list
as its words; any other program as given. Error values keep the program
as given in their `program` field.
]]
function jsonl.label(program)
  local argv = type(program) == "table" and program or {program}
  local bundled = core.bundled_provider and core.bundled_provider()
  local words = {}
  for i, word in ipairs(argv) do
    words[i] = (bundled and word == bundled) and basename(bundled) or tostring(word)
  end
  return table.concat(words, " ")
end

-- A program as one line of text (recordings, observers): argv words joined by spaces.
function jsonl.program_name(program)
  if type(program) == "table" then return table.concat(program, " ") end
  return program
end

-- The same program, as one string (pool keys, comparisons): argv words joined by NUL.
function jsonl.program_key(program)
  if type(program) == "table" then return table.concat(program, "\0") end
  return program
end

--[[ Failure of the whole connection ]]

--[[
The connection is unusable (the provider broke the protocol): no more
requests go out, and the provider is made to go away. Pending requests
fail when it has exited: with this protocol error if our TERM/KILL ended
it, but with provider_exited if it died on its own, as a provider that
crashes halfway through writing a line does (its cut line is garbage
only because it crashed).
]]
function Conn:break_connection(message)
  self:give_up(self:ending_error{code = "protocol", program = self.program,
    message = ("provider `%s` %s"):format(self.label, message)}, message)
end

--[[
The connection is given up (broken protocol, or a deadline the caller
decided was fatal, e.g. `open` never answered): no more requests go out,
the provider gets TERM, then KILL after the grace. Pending requests fail
with `failure` once it has exited (see exit_failure); `because` says what
happened, in a provider_exited message when it died on its own meanwhile.
]]
function Conn:give_up(failure, because)
  if self.state ~= "running" then return end
  self.state, self.broken_because, self.failure = "broken", because, failure
  running[self] = nil
  local c = self.c
  c:stop()
  update_observing(self)
  c:close_stdin()
  c:kill("TERM")
  self:arm_kill_timer()
end

-- The provider's last stderr lines: at most STDERR_LINES, each cut at STDERR_LINE_BYTES.
-- The message quotes the last MESSAGE_LINES of them.
local STDERR_LINES, STDERR_LINE_BYTES, MESSAGE_LINES = 10, 400, 3

function Conn:keep_stderr(line)
  local tail = self.stderr_tail
  if #line > STDERR_LINE_BYTES then line = line:sub(1, STDERR_LINE_BYTES) .. "..." end
  if #tail == STDERR_LINES then table.remove(tail, 1) end
  tail[#tail + 1] = line
end

-- An error that ends the connection, with the provider's last stderr lines.
function Conn:ending_error(fields)
  local tail = self.stderr_tail
  if tail[1] ~= nil then
    fields.stderr = table.concat(tail, "\n")
    -- the message stays one line (a live view shows one): its last lines, joined
    local last = table.move(tail, math.max(1, #tail - MESSAGE_LINES + 1), #tail, 1, {})
    fields.message = fields.message .. "; its stderr ends: " .. table.concat(last, " / ")
  end
  return errors.new(fields)
end

local function describe_exit(code, signal)
  if signal then
    return ("was killed by signal %s (status %d)"):format(signal, code)
  end
  return ("exited with status %d"):format(code)
end

-- A provider that broke the protocol or closed its stdout cannot answer
-- any more; it gets a short grace to exit on its own, then KILL.
function Conn:arm_kill_timer()
  if self.exit_code ~= nil or self.kill_timer then return end
  self.kill_timer = core.timer(EXIT_GRACE, function() self:kill("KILL") end)
end

-- What pending requests fail with once the provider has exited.
function Conn:exit_failure(code, signal)
  local ended_by_us = signal == "TERM" or signal == "KILL"
  if self.state == "broken" and ended_by_us then return self.failure end
  local message = ("provider `%s` %s"):format(self.label, describe_exit(code, signal))
  if self.broken_because then message = message .. " (after it " .. self.broken_because .. ")" end
  return self:ending_error{code = "provider_exited", program = self.program,
    exit_code = code, signal = signal, message = message}
end

function Conn:on_exit(code, signal)
  -- on its own: while in use, not after our shutdown nor once we gave up on it
  local crashed = self.state == "running" and not self.stopping
  self.exit_code, self.exit_signal = code, signal
  if self.kill_timer then self.kill_timer:stop() end
  self.failure = self:exit_failure(code, signal)
  self.state = "exited"
  running[self] = nil
  local c = self.c
  c:fail_pending(self.failure)
  c:close()
  notify_observers(self, "exit", code, signal, crashed)
  self.exited:set(code, signal)
end

--[[ Starting ]]

local function connect(conn, argv, opts)
  local on_stderr = opts.on_stderr
  local args = table.move(argv, 1, #argv, 1, {})
  args[#args + 1] = "serve"
  -- The provider leads its own process group (core.connect sees to it): a
  -- terminal's Ctrl-C then reaches only the host, which shuts providers down
  -- in order, and killing a broken provider also kills the children that
  -- would keep its stdout open.
  return core.connect{
    file = argv[1], args = args, env = opts.env, cwd = opts.cwd,
    max_line = conn.max_line, max_depth = conn.max_depth, stderr = "lines",
    -- a provider's exit fails its requests in bounded time, whatever
    -- (a descendant in a session of its own) still holds its pipes
    drain_after_exit = jsonl.EXIT_DRAIN,
    on_stderr = function(line)
      if not line then return end
      conn:keep_stderr(line)
      if on_stderr then on_stderr(line) end
    end,
    on_exit = function(code, signal) conn:on_exit(code, signal) end,
    on_fault = function(why) conn:break_connection(why) end,
    -- EOF: a provider that closed its stdout cannot answer; it should exit now.
    on_eof = function() conn:arm_kill_timer() end,
    notify = task.notify,
  }
end

--[[
Starts `program serve` (see the top for what program may be). opts:
max_line_bytes, max_depth, env, cwd, on_stderr(line) (each line of the
provider's stderr as it comes; it is kept for errors either way, see the
top). A program that cannot be
started raises an error with code "not_found" or "permission_denied"
(else "io_error") and op "start".
]]
function jsonl.start(program, opts)
  opts = opts or {}
  local argv = jsonl.argv(program, 2)
  if substitute then
    program = substitute(program)
    argv = jsonl.argv(program, 2)
  end
  connections = connections + 1
  local conn = setmetatable({
    program = program, name = basename(argv[1]), label = jsonl.label(program), number = connections,
    max_line = opts.max_line_bytes or jsonl.DEFAULT_MAX_LINE,
    max_depth = opts.max_depth or jsonl.DEFAULT_MAX_DEPTH,
    state = "running", exited = task.event(), stderr_tail = {},
  }, Conn)
  conn.info = {program = jsonl.program_name(program), conn = conn.number}
  local c, msg, errname = connect(conn, argv, opts)
  if not c then
    errors.raise{code = errname and core.error_code(errname) or "io_error",
      op = "start", path = type(program) == "string" and program or conn.label, program = program,
      message = ("cannot run provider `%s`: %s"):format(conn.label, tostring(msg))}
  end
  conn.c, conn.pid, conn.take = c, c:pid(), c.take
  running[conn] = true
  update_observing(conn)
  return conn
end

--[[ Requests ]]

function Conn:alive()
  return self.state == "running"
end

-- True while some request waits for its reply.
function Conn:in_use()
  return self.state == "running" and self.c:pending_count() > 0
end

local codec = cjson_safe.new()
codec.encode_max_depth(jsonl.DEFAULT_MAX_DEPTH)

-- params as JSON text: a string is taken as it is, a table is encoded.
local function params_text(method, params, level)
  if type(params) == "string" then return params end
  local text, err = codec.encode(params or {})
  if not text then error("cannot encode the params of `" .. tostring(method) .. "`: " .. tostring(err), level + 1) end
  return text
end

local function provider_error(conn, method, e)
  if type(e) ~= "table" then e = {} end
  return errors.new{code = type(e.code) == "string" and e.code or "internal",
    message = type(e.message) == "string" and e.message or cjson.encode(e),
    method = method, program = conn.program}
end

-- Takes replies until the terminal one; on_event gets each event (and
-- ctx). Returns the result. Nothing can have come before the first wait:
-- the request was just sent.
local function await(conn, method, rq, on_event, ctx)
  local c, take = conn.c, conn.take
  wait_until(rq, has_reply, "a reply")
  while true do
    local kind, body = take(c, rq)
    if kind == nil then
      wait_until(rq, has_reply, "a reply")
      kind, body = take(c, rq)
    end
    if kind == "result" then return body end
    if kind == "event" then
      if on_event then on_event(body, ctx) end
    elseif kind == "error" then
      error(provider_error(conn, method, body), 0)
    elseif kind == "protocol" then  -- a process request's result that makes no sense
      errors.raise{code = "protocol", message = body}
    else
      error(body, 0)  -- a failure
    end
  end
end

local function arm_timeout(conn, method, rq, seconds)
  return core.timer(seconds, function()
    conn.c:fail(rq, errors.new{code = "timeout", method = method, program = conn.program,
      seconds = seconds,
      message = ("provider `%s` did not answer `%s` within %g s"):format(conn.label, method, seconds)})
  end)
end

local NO_OPTS = {}

local function write_error(conn, method, why)
  return errors.new{code = "io_error", program = conn.program, method = method,
    message = ("cannot write to provider `%s`: %s"):format(conn.label, tostring(why))}
end

-- Sends a request (a process request with capture, limit, argv, quiet:
-- see smol.conn's send); its reply queue, or nil and the error.
function Conn:send_request(method, params, capture, limit, argv, quiet)
  if self.state ~= "running" then return nil, self.failure end
  local rq, why = self.c:send(method, params, capture, limit, argv, quiet)
  if rq then return rq end
  return nil, write_error(self, method, why)
end

--[[
Sends a request (params: JSON text) and waits for its terminal line:
returns true and the result, or false and the error value (the provider's
error code, "protocol", "provider_exited", "timeout", "io_error", or
whatever on_event or a cancel raised). It raises only for a bad method
name. on_event(event, ctx) gets each event in order (ctx: anything, so a
caller needs no closure per request). opts.timeout: seconds to wait for
the terminal line (math.huge: no limit). opts.on_late(msg): for a request
given up on (timeout, cancel) whose terminal line comes later; it gets
{result = ...} or {error = ...} and must not yield.
]]
function Conn:try_request(method, params, on_event, ctx, opts)
  opts = opts or NO_OPTS
  local rq, err = self:send_request(method, params)
  if not rq then return false, err end
  local timeout, timer = opts.timeout, nil
  if timeout and timeout ~= math.huge then timer = arm_timeout(self, method, rq, timeout) end
  local ok, result = pcall(await, self, method, rq, on_event, ctx)
  if timer then timer:stop() end
  if ok then return true, result end
  -- (after an error reply the request has ended already: abandon does nothing)
  return false, result, self.c:abandon(rq, opts.on_late)
end

--[[
A process request (exec, wait): as try_request, but its result is the
one smol.sandbox returns, made by the connection (see smol.conn's send:
capture "events", "copy" or "none", limit, argv, quiet). deadline:
seconds to wait for the result at most (then a "timeout" error), or nil.
On failure the third value is the process_id of its `started` event, if
any.
]]
function Conn:try_process(method, params, on_event, ctx, capture, limit, argv, quiet, deadline)
  -- (send_request, inline: every command comes this way)
  if self.state ~= "running" then return false, self.failure end
  local rq, why = self.c:send(method, params, capture, limit, argv, quiet)
  if not rq then return false, write_error(self, method, why) end
  local timer = deadline and arm_timeout(self, method, rq, deadline)
  local ok, result = pcall(await, self, method, rq, on_event, ctx)
  if timer then timer:stop() end
  if ok then return true, result end
  return false, result, self.c:abandon(rq)
end

-- Conn:try_request that returns the result or raises the error value;
-- params may also be a table, encoded here.
function Conn:request(method, params, on_event, opts)
  local ok, result = self:try_request(method, params_text(method, params, 2), on_event, nil, opts)
  if not ok then error(result, 0) end
  return result
end

-- Sends a request whose reply nobody waits for (e.g. `kill` on cancel).
function Conn:notify(method, params)
  local rq, err = self:send_request(method, params_text(method, params, 2))
  if not rq then error(err, 0) end
  self.c:abandon(rq)
end

-- Asks the provider to shut down and waits (at most grace seconds) for it
-- to exit; kills it when it does not. Never raises.
function Conn:shutdown(grace)
  grace = grace or 2
  self.stopping = true
  if self.state == "running" then
    pcall(self.request, self, "shutdown", {}, nil, {timeout = grace})
    if self.exit_code == nil then self.c:close_stdin() end
  end
  if self.exit_code == nil then
    local timer = core.timer(grace, function() self:kill("KILL") end)
    self.exited:wait()
    timer:stop()
  end
  return self.exit_code, self.exit_signal
end

-- Waits until the provider process has exited; returns its code and signal.
function Conn:wait_exit()
  return self.exited:wait()
end

-- Sends KILL to the provider's process group (tests of crash handling use it).
function Conn:kill(signal)
  if self.exit_code ~= nil then return false end
  return self.c:kill(signal or "TERM")
end

jsonl.Conn = Conn
return jsonl
