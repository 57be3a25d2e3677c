--[[
One group of conformance checks at run time: its provider process(es), its
session, and the helpers checks use to talk to them.

A group is {name, session = false (no session opened for it), needs = CAP
(skip unless the session announces CAP), raw_errors = true (id-null error
replies are what it provokes), checks = {{name, fn, needs = CAP,
session = false (runs even when no session can be opened)}, ...}}.
A check's fn(ctx) returns ok, expected, got (see expect.lua), or "skip" and
a reason; an error it raises is a failure whose `got` is the error message.
]]
local cjson = require "cjson"
local wire = require "smol.provider.conformance.wire"
local expect = require "smol.provider.conformance.expect"

local group_run = {}
group_run.__index = group_run

local null = cjson.null
local TEARDOWN_TIMEOUT = 2   -- seconds for each close and for the provider to exit
local STUCK_GRACE = 1        -- seconds a provider that already failed to answer gets to exit

-- The variable set in the provider's environment that commands must not see.
group_run.LEAK_NAME = "SMOLWF_CONFORMANCE_LEAK"

function group_run:leak_value()
  return "leak-" .. self.env.token
end

-- Starts another provider process for this group; stopped at teardown.
function group_run:start_provider()
  local conn, err = wire.start(self.env.argv, {
    env_extra = {[group_run.LEAK_NAME] = self:leak_value()},
    stderr_sink = self.env.stderr_sink,
  })
  if not conn then error(err, 0) end
  self.conns[#self.conns + 1] = conn
  return conn
end

function group_run:open_params(extra)
  self.env.opens = (self.env.opens or 0) + 1
  local params = {
    metadata = {request_id = "conformance-open-" .. self.env.opens,
                sandbox_group_id = "conformance-" .. self.env.token},
    profile = self.env.profile,
    workspace_sync = {host_path = self.env.ws_host},
    cwd = null,
  }
  for k, v in pairs(extra or {}) do params[k] = v end
  return params
end

--[[
Opens a session on conn (default: the group's) and tracks it so teardown
closes it. Returns the request record and the session (nil on failure).
timeout: seconds to wait for the reply (default: the connection's).
]]
function group_run:open_session(extra, conn, timeout)
  conn = conn or self.conn
  local req = conn:call("open", self:open_params(extra), {timeout = timeout})
  local s = req.result
  if not expect.is_result(req) or type(s.id) ~= "string" then return req, nil end
  self.sessions[#self.sessions + 1] = {session = s, conn = conn}
  return req, s
end

-- Teardown will not close this session (a check closes it its own way).
function group_run:forget_session(session)
  for _, entry in ipairs(self.sessions) do
    if entry.session == session then entry.closed = true end
  end
end

-- Closes a session opened by open_session; returns the request record.
-- wrapped: send {session = SESSION} instead of the session itself;
-- timeout: seconds to wait for the reply (default: the connection's).
function group_run:close_session(session, conn, wrapped, timeout)
  self:forget_session(session)
  return (conn or self.conn):call("close", wrapped and {session = session} or session,
    {timeout = timeout})
end

local function with_session(self, params)
  params = params or {}
  if params.session == nil then params.session = self.session end
  return params
end

-- A request on the group's session, awaited (opts.timeout in seconds).
function group_run:op(method, params, opts)
  return self.conn:call(method, with_session(self, params), opts)
end

-- The same, not awaited: returns the record at once.
function group_run:send_op(method, params, opts)
  return self.conn:send(method, with_session(self, params), opts)
end

function group_run:exec_params(argv, extra)
  local params = {argv = argv, cwd = null, env = null, stdin_base64 = null}
  for k, v in pairs(extra or {}) do params[k] = v end
  return params
end

-- exec of argv on the group's session; extra adds or replaces params.
function group_run:exec(argv, extra, timeout)
  return self:op("exec", self:exec_params(argv, extra), {timeout = timeout})
end

function group_run:caps()
  return self.session and self.session.capabilities or {}
end

function group_run:has(cap)
  local caps = self:caps()
  return type(caps) == "table" and caps[cap] ~= nil and caps[cap] ~= false and caps[cap] ~= null
end

-- ======================================================================
-- Running a group
-- ======================================================================

-- A check that cannot run because open failed (env.no_session says why): one
-- that needs a session, or any when the provider did not answer open at all.
local function blocked(self, check)
  return self.env.no_session ~= nil and (check.session ~= false or not self.env.serving)
end

-- Whether any check of the group can run: all of them unless open failed.
local function any_runnable(self)
  if not self.env.no_session then return true end
  if not self.env.serving then return false end
  for _, check in ipairs(self.group.checks) do
    if not blocked(self, check) then return true end
  end
  return false
end

local function setup(self)
  if not any_runnable(self) then return end
  self.conn = self:start_provider()
  if self.group.session == false or self.env.no_session then return end
  local req, session = self:open_session()
  if not session then
    return "no session for this group: open answered " .. expect.reply(req)
  end
  self.session = session
  if self.group.needs and not self:has(self.group.needs) then
    self.skip_all = "the session does not announce `" .. self.group.needs .. "`"
  end
end

-- Ctrl-C reaches a check as the host's interrupt error: it ends the run, not the check.
local function is_interrupt(err)
  return type(err) == "table" and err.code == "interrupted"
end

local function run_check(self, check)
  local r = {group = self.group.name, name = check[1]}
  if blocked(self, check) then
    r.status, r.blocked = "skip", true
    r.got = "needs a session, and open failed: " .. self.env.no_session
  elseif self.setup_error then
    r.status, r.expected, r.got = "fail", "a working provider", self.setup_error
  elseif self.skip_all or (check.needs and not self:has(check.needs)) then
    r.status = "skip"
    r.got = self.skip_all or ("the session does not announce `" .. check.needs .. "`")
  else
    local ok, pass, expected, got = xpcall(check[2], debug.traceback, self)
    if not ok and is_interrupt(pass) then self.interrupted = pass; return nil end
    if not ok then pass, expected, got = false, "no error in the kit", pass end
    if pass == "skip" then
      r.status, r.got = "skip", expected
    else
      r.status, r.expected, r.got = pass and "pass" or "fail", expected, got
    end
  end
  return r
end

-- Closes what the checks left open; a stuck provider is not asked twice.
local function teardown(self)
  for _, entry in ipairs(self.sessions) do
    if not entry.closed and not entry.conn.exited and not entry.conn.stuck then
      entry.conn:call("close", entry.session, {timeout = TEARDOWN_TIMEOUT})
    end
  end
  for _, conn in ipairs(self.conns) do
    if not conn:stop(conn.stuck and STUCK_GRACE or TEARDOWN_TIMEOUT) then
      conn.violations[#conn.violations + 1] = "provider did not exit within "
        .. (conn.stuck and STUCK_GRACE or TEARDOWN_TIMEOUT)
        .. "s of shutdown and end of input (killed)"
    end
  end
end

local function protocol_result(self)
  local problems = {}
  for _, conn in ipairs(self.conns) do
    for _, v in ipairs(conn.violations) do problems[#problems + 1] = v end
    if not self.group.raw_errors then
      for _, msg in ipairs(conn.null_replies) do
        problems[#problems + 1] = "unprovoked reply with id null: " .. expect.show(msg)
      end
    end
  end
  local r = {group = self.group.name,
    name = "replies well-formed (JSON objects, known ids, none after the terminal line), "
      .. "no crash, exits when asked",
    expected = "no protocol violations"}
  r.status = #problems == 0 and "pass" or "fail"
  r.got = #problems == 0 and "none" or (#problems .. ": " .. table.concat(problems, "; "))
  return r
end

-- The end of the provider's stderr, for a failure it may explain ("" when silent).
local function stderr_note(conn)
  local tail = conn.stderr_tail
  if #tail == 0 then return "" end
  local last = {}
  for i = math.max(1, #tail - 2), #tail do last[#last + 1] = tail[i] end
  return "; provider stderr: " .. expect.show(table.concat(last, "\n"))
end

--[[
Before any group runs: opens one session on a fresh provider, waiting at
most `timeout` seconds, and closes it again. Returns nil when that worked.
Otherwise returns the one failed result that stands for every check needing
a session, and sets env.no_session (why) and env.serving (the provider
answered, with an error: checks that need no session still run; a provider
that exited or never answered gets none).
]]
function group_run.preflight(env, timeout)
  local self = setmetatable({env = env, group = {name = "session"}, conns = {}, sessions = {}}, group_run)
  self.conn = self:start_provider()
  local req, session = self:open_session(nil, nil, timeout)
  -- read before teardown: stopping a provider that never answered fails the request
  local reply, answered = expect.reply(req), req.done and not req.lost
  teardown(self)
  if session then return nil end
  env.no_session, env.serving = reply, answered
  local profile = env.profile.provider .. "/" .. env.profile.name
  return {group = "session", name = "open with profile " .. profile .. " answers a session",
    status = "fail", expected = "a session {id, capabilities}",
    got = reply .. (answered and "" or stderr_note(self.conn))}
end

-- Runs every check of group against fresh provider(s); emit(result) per check.
function group_run.run_group(env, group, emit)
  local self = setmetatable({env = env, group = group, conns = {}, sessions = {}}, group_run)
  local ok, err = pcall(setup, self)
  if not ok then self.setup_error = tostring(err) else self.setup_error = err end
  for _, check in ipairs(group.checks) do
    local result = run_check(self, check)
    if self.interrupted then break end
    emit(result)
  end
  teardown(self)
  if self.interrupted then error(self.interrupted, 0) end
  if #self.conns > 0 then emit(protocol_result(self)) end
end

return group_run
