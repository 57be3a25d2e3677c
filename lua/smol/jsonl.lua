--[[
smol.jsonl: one connection to a provider process speaking JSON Lines
(docs/protocol.md, its transport).

  local conn = jsonl.start(program, {max_line_bytes = N, max_depth = N})
  local result = conn:request("read_file", params, on_event, {timeout = 5, on_late = fn})
  conn:notify("kill", params)       -- fire and forget: the reply is dropped
  conn:shutdown(grace)              -- `shutdown`, then wait for the exit
  conn:give_up(err, because)        -- stop using it: TERM, KILL after a grace;
                                    -- pending requests fail with err
  conn:alive(), conn.pid, conn.program, conn.exit_code, conn:wait_exit()
  local remove = jsonl.observe(fn)  -- fn(direction, info, line) for every line
                                    -- ("send"/"recv"), fn("exit", info, status, signal, crashed);
                                    -- remove() unregisters just this fn

Requests are multiplexed by integer id. The read callback (on the main
state) only decodes a line and routes it to the queue of its request; the
requesting task pops its queue, so a request's events reach `on_event` in
the waiting task's own context, in order, and `on_event` may itself wait.

Faults:
  - a line that is not a JSON object, nested deeper than max_depth, longer
    than max_line_bytes, a reply for an id never sent or with a null id:
    the connection is broken and the provider terminated; every pending
    request then fails with a "protocol" error naming what was wrong
    (or provider_exited, when the provider died on its own: see
    break_connection).
  - the provider exits: every pending request fails with "provider_exited"
    naming the program and how it ended.
  - a request whose waiter gives up (cancelled, on_event raised, timeout)
    is "abandoned": its later lines are dropped until its terminal line.
]]

local cjson = require "cjson"
local cjson_safe = require "cjson.safe"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"

local jsonl = {}
local null = cjson.null
local decode_message = core.decode_message

jsonl.DEFAULT_MAX_LINE = 256 * 1024 * 1024
jsonl.DEFAULT_MAX_DEPTH = 128
-- How long a provider that closed its stdout or broke the protocol may
-- take to exit before it is killed.
local EXIT_GRACE = 2

-- See jsonl.observe. Replaced, never changed in place, so an observer
-- that removes itself (or adds another) does not disturb the loop
-- notifying the current ones.
local observers = {}
local connections = 0   -- connection numbers, for observers and names
local running = setmetatable({}, {__mode = "k"})  -- connections whose replies the host may route

--[[
Replies are routed to their reply queues in C (proc:route_replies, see
host/smolwf/router.c) while the connection runs and no observer wants to
see every line; lines routing does not take come to Conn:on_line.
]]
local SPLIT_MIN = 4096  -- lines this long may be streamed output: see decode_split

local function update_routing(conn)
  if conn.state == "running" and observers[1] == nil then
    conn.proc:route_replies(conn.pending, task.notify, conn.max_depth, SPLIT_MIN)
  else
    conn.proc:route_replies(nil)
  end
end

local function set_observers(list)
  observers = list
  for conn in pairs(running) do update_routing(conn) end
end

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

local function notify_observer(conn, direction, what, signal, crashed)
  local list = observers
  for i = 1, #list do list[i].fn(direction, conn.info, what, signal, crashed) end
end

local function basename(path)
  return (tostring(path):match("([^/]+)/*$")) or tostring(path)
end

--[[
How messages name a provider program: the bundled one by its name,
`smolwf-provider`, since its path (a build or install directory) is long
and would push the cause of an error out of a narrow column; any other
program as given. Error values keep the full path in their `program` field.
]]
function jsonl.label(program)
  local bundled = core.bundled_provider and core.bundled_provider()
  if bundled and program == bundled then return basename(bundled) end
  return program
end

-- A codec of our own: depth-capped, without touching the shared cjson
-- module's settings that other code may rely on. cjson.safe's decode
-- returns nil and the message instead of raising: a line costs no pcall.
local function new_codec(max_depth)
  local codec = cjson_safe.new()
  codec.decode_max_depth(max_depth)
  codec.encode_max_depth(max_depth)
  codec.decode_invalid_numbers(false)
  return codec
end

--[[
A request in flight is a reply queue `rq`: the messages routed to it sit
as (kind, body) pairs at rq[head..tail]; kind is "event", "result",
"error", or "failure" (body: the error value to raise). Replies that came
before the waiter looks need no wake; a waiter that finds rq empty waits
through smol.task (rq.waiters). A queue whose request ended normally goes
back to the connection's pool: a request then makes no table of its own.
]]
local function push(rq, kind, body)
  local tail = rq.tail
  rq[tail + 1], rq[tail + 2], rq.tail = kind, body, tail + 2
  if rq.waiters then task.notify(rq) end
end

local function has_reply(rq)
  return rq.head <= rq.tail
end

--[[ Failure of the whole connection ]]

-- Fails every pending request with err and forgets them.
function Conn:fail_pending(err)
  -- emptied in place: the router holds this very table
  local pending, failed = self.pending, {}
  for id, rq in pairs(pending) do
    pending[id], self.abandoned[id] = nil, nil
    failed[#failed + 1] = rq
  end
  for _, rq in ipairs(failed) do push(rq, "failure", err) end
end

--[[
The connection is unusable (the provider broke the protocol): no more
requests go out, and the provider is made to go away. Pending requests
fail when it has exited: with this protocol error if our TERM/KILL ended
it, but with provider_exited if it died on its own, as a provider that
crashes halfway through writing a line does (its cut line is garbage
only because it crashed).
]]
function Conn:break_connection(message)
  self:give_up(errors.new{code = "protocol", program = self.program,
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
  update_routing(self)
  self.proc:close_stdin()
  self.proc:kill("TERM")
  self:arm_kill_timer()
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
  self.kill_timer = core.timer(EXIT_GRACE, function()
    if self.exit_code == nil then self.proc:kill("KILL") end
  end)
end

-- What pending requests fail with once the provider has exited.
function Conn:exit_failure(code, signal)
  local ended_by_us = signal == "TERM" or signal == "KILL"
  if self.state == "broken" and ended_by_us then return self.failure end
  local message = ("provider `%s` %s"):format(self.label, describe_exit(code, signal))
  if self.broken_because then message = message .. " (after it " .. self.broken_because .. ")" end
  return errors.new{code = "provider_exited", program = self.program,
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
  update_routing(self)
  self:fail_pending(self.failure)
  self.proc:close()
  notify_observer(self, "exit", code, signal, crashed)
  self.exited:set(code, signal)
end

--[[ Routing received lines ]]

-- rq's request ended normally: its items were all taken, its waiters woken.
function Conn:give_back_queue(rq)
  for i = rq.head, rq.tail do rq[i] = nil end  -- what came after the end (a late timeout)
  rq.head, rq.tail = 1, 0
  local free = self.free_queues
  free[#free + 1] = rq
end

-- A message for an id nobody waits for: one given up on (its terminal
-- line goes to on_late), or a protocol violation.
function Conn:stray(id, kind, body)
  local late = self.abandoned[id]
  if not late then
    return self:break_connection(("sent a reply for unknown request id %s"):format(cjson.encode(id)))
  end
  if kind == "result" or kind == "error" then
    self.abandoned[id] = nil
    -- on the read callback: on_late must not yield, and its error must not escape
    if type(late) == "function" then pcall(late, {[kind] = body}) end
  end
end

--[[
Output events are almost all base64 payload, and lua-cjson copies a string
one character at a time (about 300 MB/s), which would cap streaming far
below the pipe's speed. So for a long line the value of its
"data_base64":"..." member is cut out (a base64 string has no quote), cjson
decodes the short rest with that member emptied, and the payload is decoded
straight from the line (core.b64decode of a range: no copy of it as a Lua
string). The event then holds the bytes under the key jsonl.PAYLOAD, which
no JSON text can produce, for the sandbox client to take; its data_base64
is made from the line only if someone reads it. Anything unexpected (an
escape such as "\/" in the payload, invalid base64, the member not in an
event) falls back to decoding the whole line, which keeps the text for the
client to judge. Short lines (every reply but streamed output) are decoded
by core.decode_message in C, which costs about half as much.
]]
local PAYLOAD_KEY = '"data_base64":"'
jsonl.PAYLOAD = setmetatable({}, {__name = "jsonl.PAYLOAD", __tostring = function() return "jsonl.PAYLOAD" end})

-- data_base64 of a split event, cut from its line on first use.
local function lazy_payload_text(line, first, last)
  return {__index = function(ev, key)
    if key ~= "data_base64" then return nil end
    local text = line:sub(first, last)
    rawset(ev, "data_base64", text)
    return text
  end}
end

local function decode_split(codec, line)
  local _, key_end = line:find(PAYLOAD_KEY, 1, true)
  local close = key_end and line:find('"', key_end + 1, true)
  if not close then return nil end
  local bytes = core.b64decode(line, key_end + 1, close - 1)
  if not bytes then return nil end
  local msg = codec.decode(line:sub(1, key_end) .. line:sub(close))
  local ev = type(msg) == "table" and msg.event
  if type(ev) ~= "table" or ev.data_base64 ~= "" then return nil end
  ev.data_base64 = nil
  ev[jsonl.PAYLOAD] = bytes
  setmetatable(ev, lazy_payload_text(line, key_end + 1, close - 1))
  return msg
end

local KINDS = {"result", "error", "event"}  -- a message's kind: the first member present

-- A line decoded by lua-cjson (long lines, and the rare short line the C
-- decoder leaves to it), checked as core.decode_message checks it:
-- id, kind, body, or nil and what was wrong.
function Conn:decode_with_cjson(line)
  local codec, msg, why = self.codec, nil, nil
  if #line >= SPLIT_MIN then msg = decode_split(codec, line) end
  if msg == nil then msg, why = codec.decode(line) end
  if msg == nil then return nil, "a line that is not valid JSON: " .. tostring(why) end
  if type(msg) ~= "table" then return nil, "a line that is not a JSON object: " .. line:sub(1, 80) end
  local id = msg.id
  if id == nil or id == false or id == null then
    local e = type(msg.error) == "table" and msg.error or {}
    return nil, ("a reply without an id (%s: %s)"):format(tostring(e.code), tostring(e.message))
  end
  for _, kind in ipairs(KINDS) do
    if msg[kind] ~= nil then return id, kind, msg[kind] end
  end
  return id, false
end

-- Every line the provider writes (the hot path of every reply).
function Conn:on_line(line)
  if observers[1] then notify_observer(self, "recv", line) end
  -- After a protocol error nothing the provider says can be trusted.
  if line == "" or self.state ~= "running" then return end
  local id, kind, body
  if #line < SPLIT_MIN then id, kind, body = decode_message(line, self.max_depth) end
  if id == nil and not kind then id, kind, body = self:decode_with_cjson(line) end
  if id == nil then return self:break_connection("sent " .. kind) end
  local rq = self.pending[id]
  if rq == nil then return self:stray(id, kind, body) end
  if not kind then
    return self:break_connection(("sent a reply for request %s with none of event, result, error"):format(id))
  end
  if kind ~= "event" then self.pending[id] = nil end
  push(rq, kind, body)
end

-- The end of the provider's stdout: err when it was unreadable or a line too long.
function Conn:on_stdout_end(err)
  if err then
    return self:break_connection(("sent an unreadable or too long line (limit %d bytes): %s")
      :format(self.max_line, err))
  end
  -- EOF: a provider that closed its stdout cannot answer; it should exit now.
  self:arm_kill_timer()
end

--[[ Starting ]]

local function default_stderr(prefix)
  return function(line)
    if line then io.stderr:write(prefix, line, "\n") end
  end
end

local function spawn_provider(conn, opts)
  local args = {conn.program}
  for _, a in ipairs(opts.args or {"serve"}) do args[#args + 1] = a end
  local on_stderr = opts.on_stderr or default_stderr("[" .. conn.name .. "] ")
  -- The provider leads its own process group: a terminal's Ctrl-C then reaches
  -- only the host, which shuts providers down in order, and killing a broken
  -- provider also kills the children that would keep its stdout open.
  return core.spawn{
    file = conn.program, args = args, env = opts.env, cwd = opts.cwd, process_group = true,
    stdin = true, stdout = "lines", stderr = "lines", max_line = conn.max_line,
    on_stdout = function(line, err)
      if line then return conn:on_line(line) end
      conn:on_stdout_end(err)
    end,
    on_stderr = function(line) if line then on_stderr(line) end end,
    on_exit = function(code, signal) conn:on_exit(code, signal) end,
  }
end

local START_ERROR_CODE = {ENOENT = "not_found", EACCES = "permission_denied", EPERM = "permission_denied"}

--[[
Starts `program serve` (opts.args replaces {"serve"}). opts: max_line_bytes,
max_depth, env, cwd, on_stderr(line) (default: our stderr, each line
prefixed with "[NAME] "). A program that cannot be started raises an error
with code "not_found" or "permission_denied" (else "io_error") and op "start".
]]
function jsonl.start(program, opts)
  opts = opts or {}
  if type(program) ~= "string" or program == "" then
    error("jsonl.start: program must be a non-empty string", 2)
  end
  connections = connections + 1
  local conn = setmetatable({
    program = program, name = basename(program), label = jsonl.label(program), number = connections,
    max_line = opts.max_line_bytes or jsonl.DEFAULT_MAX_LINE,
    max_depth = opts.max_depth or jsonl.DEFAULT_MAX_DEPTH,
    codec = new_codec(opts.max_depth or jsonl.DEFAULT_MAX_DEPTH),
    pending = {}, abandoned = {}, free_queues = {}, next_id = 1, state = "running",
    exited = task.event(),
  }, Conn)
  conn.info = {program = program, conn = conn.number}
  local proc, msg, errname = spawn_provider(conn, opts)
  if not proc then
    errors.raise{code = START_ERROR_CODE[errname] or "io_error",
      op = "start", path = program, program = program,
      message = ("cannot run provider `%s`: %s"):format(program, tostring(msg))}
  end
  conn.proc, conn.pid = proc, proc.pid
  running[conn] = true
  update_routing(conn)
  return conn
end

--[[ Requests ]]

function Conn:alive()
  return self.state == "running"
end

-- params as JSON text: a string is taken as it is, a table is encoded.
function Conn:params_text(method, params)
  if type(params) == "string" then return params end
  local text, err = self.codec.encode(params or {})
  if not text then error("jsonl: cannot encode the params of `" .. tostring(method) .. "`: " .. tostring(err), 3) end
  return text
end

-- For each method name found valid, what comes between a request's id and
-- its params: one piece to write, and no pattern match per request.
local method_infix = {}

local function check_method(method)
  if type(method) ~= "string" or not method:match("^[%w_]+$") then
    error(("jsonl: method must be a name, got %q"):format(tostring(method)), 4)
  end
  method_infix[method] = ',"method":"' .. method .. '","params":'
end

--[[
Sends a new request (params: JSON text) and registers it; returns its id
and reply queue, or nil and the error: the connection's failure once it is
not running, or an io_error when the write fails. The line goes out in
pieces, made into one string only for observers.
]]
function Conn:send_request(method, params)
  if self.state ~= "running" then return nil, self.failure end
  if not method_infix[method] then check_method(method) end
  local id = self.next_id
  self.next_id = id + 1
  if observers[1] then
    notify_observer(self, "send", '{"id":' .. id .. method_infix[method] .. params .. "}")
  end
  local ok, why = self.proc:try_write('{"id":', id, method_infix[method], params, "}\n")
  if not ok then
    return nil, errors.new{code = "io_error", program = self.program, method = method,
      message = ("cannot write to provider `%s`: %s"):format(self.label, tostring(why))}
  end
  local free = self.free_queues   -- a pooled reply queue (see push), or a new one
  local n = #free
  local rq = free[n]
  if rq then free[n] = nil else rq = {head = 1, tail = 0} end
  self.pending[id] = rq
  return id, rq
end

-- The waiter gave up on request id: drop its later lines. on_late(msg),
-- if given, gets its terminal message ({result = ...} or {error = ...})
-- should it still come (e.g. to close a
-- session whose `open` was answered after its deadline); it must not yield.
function Conn:abandon(id, on_late)
  if self.pending[id] then
    self.pending[id] = nil
    self.abandoned[id] = on_late or true
  end
end

local function provider_error(conn, method, e)
  if type(e) ~= "table" then e = {} end
  return errors.new{code = type(e.code) == "string" and e.code or "internal",
    message = type(e.message) == "string" and e.message or cjson.encode(e),
    method = method, program = conn.program}
end

-- Takes replies until the terminal one; on_event gets each event (and ctx).
local function await(conn, method, rq, on_event, ctx)
  while true do
    local head = rq.head
    if head > rq.tail then
      task.wait_until(rq, has_reply, "a reply")
      head = rq.head
    end
    local kind, body = rq[head], rq[head + 1]
    rq[head], rq[head + 1], rq.head = nil, nil, head + 2
    if kind == "result" then return body end
    if kind == "event" then
      if on_event then on_event(body, ctx) end
    elseif kind == "error" then
      error(provider_error(conn, method, body), 0)
    else
      error(body, 0)  -- a failure
    end
  end
end

local function arm_timeout(conn, method, rq, seconds)
  return core.timer(seconds, function()
    push(rq, "failure", errors.new{code = "timeout", method = method, program = conn.program,
      seconds = seconds,
      message = ("provider `%s` did not answer `%s` within %g s"):format(conn.label, method, seconds)})
  end)
end

local NO_OPTS = {}

--[[
Sends a request (params: JSON text) and waits for its terminal line:
returns true and the result, or false and the error value (the provider's
error code, "protocol", "provider_exited", "timeout", "io_error", or
whatever on_event or a cancel raised). It raises only for a bad method
name. on_event(event, ctx) gets each event in order (ctx: anything, so a
caller needs no closure per request). opts.timeout: seconds to wait for the terminal line
(math.huge: no limit). opts.on_late(msg): see Conn:abandon; for a request
given up on (timeout, cancel) whose terminal line comes later.
]]
function Conn:try_request(method, params, on_event, ctx, opts)
  opts = opts or NO_OPTS
  local id, rq = self:send_request(method, params)
  if not id then return false, rq end
  local timeout, timer = opts.timeout, nil
  if timeout and timeout ~= math.huge then timer = arm_timeout(self, method, rq, timeout) end
  local ok, result = pcall(await, self, method, rq, on_event, ctx)
  if timer then timer:stop() end
  if ok then self:give_back_queue(rq) else self:abandon(id, opts.on_late) end
  return ok, result
end

-- Conn:try_request that returns the result or raises the error value;
-- params may also be a table, encoded here.
function Conn:request(method, params, on_event, opts)
  local ok, result = self:try_request(method, self:params_text(method, params), on_event, nil, opts)
  if not ok then error(result, 0) end
  return result
end

-- Sends a request whose reply nobody waits for (e.g. `kill` on cancel).
function Conn:notify(method, params)
  local id, err = self:send_request(method, self:params_text(method, params))
  if not id then error(err, 0) end
  self:abandon(id)
end

-- Asks the provider to shut down and waits (at most grace seconds) for it
-- to exit; kills it when it does not. Never raises.
function Conn:shutdown(grace)
  grace = grace or 2
  self.stopping = true
  if self.state == "running" then
    pcall(self.request, self, "shutdown", {}, nil, {timeout = grace})
    if self.exit_code == nil then self.proc:close_stdin() end
  end
  if self.exit_code == nil then
    local timer = core.timer(grace, function() self.proc:kill("KILL") end)
    self.exited:wait()
    timer:stop()
  end
  return self.exit_code, self.exit_signal
end

-- Waits until the provider process has exited; returns its code and signal.
function Conn:wait_exit()
  return self.exited:wait()
end

jsonl.Conn = Conn
return jsonl
