--[[
Conformance checks: nothing outlives a session or the provider. close,
shutdown and end of input must kill every process a session started,
children included. The kit spawns `sleep` with a unique duration and looks
for it in this machine's /proc (a parent pid namespace sees the processes
of the sandboxes below it); where it cannot see them at all (a provider
that runs commands elsewhere) the check is skipped, not passed.
]]
local expect = require "smol.provider.conformance.expect"
local hostside = require "smol.provider.conformance.hostside"
local wire = require "smol.provider.conformance.wire"

local APPEAR_TIMEOUT = 8     -- seconds for spawned processes to show up (ms normally; slack for a loaded machine)
local VANISH_TIMEOUT = 2     -- seconds for them to be gone after close (ms when it works)

local function alive(marker)
  local procs = hostside.find_procs(marker)
  if not procs then return nil end
  local live = {}
  for _, p in ipairs(procs) do
    if p.state ~= "Z" then live[#live + 1] = p end   -- a zombie is dead, only not yet reaped
  end
  return live
end

-- Two sleeps, one the child of a shell that then becomes the other.
local function sleeper_argv(marker_a, marker_b)
  return {"sh", "-c", "sleep " .. marker_a .. " & exec sleep " .. marker_b}
end

local issued = {}   -- every marker handed out, for the sweep at the end of a run

local function markers()
  local n = math.random(100000, 999999)
  local a, b = "3131." .. n, "3132." .. n
  issued[#issued + 1], issued[#issued + 2] = a, b
  return a, b
end

--[[
KILLs whatever still carries a marker of this run. A check that gave up
early (the sleeps showed up only after it stopped looking, or a provider
broke mid-check) would otherwise leave a broken provider's sleeps behind.
]]
local function sweep()
  for _, m in ipairs(issued) do
    local procs = hostside.find_procs(m)
    if procs then hostside.kill(procs) end
  end
  issued = {}
end

--[[
Starts two sleeps on conn in session (by spawn) and waits until both show
up. Returns the two markers, or nil and the check's outcome instead:
{"skip", reason} or {false, expected, got}.
]]
local function start_sleepers(conn, session)
  if not hostside.find_procs("") then return nil, {"skip", "this machine's /proc cannot be listed"} end
  local a, b = markers()
  local req = conn:call("spawn", {session = session, argv = sleeper_argv(a, b),
    cwd = wire.null, env = wire.null, stdin_base64 = wire.null})
  if not expect.is_result(req) then
    return nil, {false, "spawn answers {process_id}", expect.reply(req)}
  end
  local both = function()
    local l1, l2 = alive(a), alive(b)
    return #l1 > 0 and #l2 > 0
  end
  -- on a loaded machine they can take long: once either shows up, the
  -- machine can see them, and the other gets the same time again
  local seen = wire.wait_until(both, APPEAR_TIMEOUT)
    or (#alive(a) + #alive(b) > 0 and wire.wait_until(both, APPEAR_TIMEOUT))
  if not seen then
    return nil, {"skip", ("the spawned sleeps are not visible on this machine (after %gs: %s; %s)")
      :format(APPEAR_TIMEOUT, hostside.describe_procs(hostside.find_procs(a)),
        hostside.describe_procs(hostside.find_procs(b)))}
  end
  return {a, b}
end

local function gone(marks)
  local left = {}
  local ok = wire.wait_until(function()
    left = {}
    for _, m in ipairs(marks) do
      for _, p in ipairs(alive(m)) do left[#left + 1] = p end
    end
    return #left == 0
  end, VANISH_TIMEOUT)
  if ok then return true, "none left" end
  hostside.kill(left)   -- the kit leaves nothing behind, even for a broken provider
  return false, "still running (killed by the kit now): " .. hostside.describe_procs(left)
end

local function close_kills(ctx)
  local req, s = ctx:open_session()
  if not s then return false, "a session", expect.reply(req) end
  local marks, outcome = start_sleepers(ctx.conn, s)
  if not marks then return table.unpack(outcome) end
  local closed = ctx:close_session(s)
  if not expect.is_result(closed) then return expect.result(closed, "close answers {}") end
  local ok, got = gone(marks)
  return ok, "both sleeps gone within " .. VANISH_TIMEOUT .. "s of close", got
end

local function close_answers_exec(ctx)
  local req, s = ctx:open_session()
  if not s then return false, "a session", expect.reply(req) end
  local exec = ctx.conn:send("exec", {session = s, argv = {"sleep", "30"}, cwd = wire.null,
    env = wire.null, stdin_base64 = wire.null})
  wire.wait_until(function() return #exec.events > 0 end, 2)   -- started: the command runs
  ctx:forget_session(s)
  ctx.conn:send("close", s)   -- its own reply may come before or after the exec's
  local answered = ctx.conn:wait(exec, VANISH_TIMEOUT)
  return answered, "the exec gets its terminal line within " .. VANISH_TIMEOUT .. "s",
    expect.reply(exec)
end

-- Only where the session's cwd is the workspace's own host path (isolation "none").
local function close_removes_files(ctx)
  local req, s = ctx:open_session()
  if not s then return false, "a session", expect.reply(req) end
  local cwd = s.cwd
  local seed = type(cwd) == "string" and hostside.read(cwd .. "/seed.txt")
  if cwd == ctx.env.ws_host or seed ~= ctx.env.ws_files["seed.txt"] then
    ctx:close_session(s)
    return "skip", "the session's cwd is not a host path of its own"
  end
  ctx:close_session(s)
  local removed = wire.wait_until(function() return not hostside.exists(cwd) end, 2)
  return removed, cwd .. " removed by close", removed and "removed" or "still there"
end

-- A fresh provider with an open session running two sleeps; end_it(conn) ends it.
local function provider_ends(ctx, end_it, expected)
  local conn = ctx:start_provider()
  local req, s = ctx:open_session(nil, conn)
  if not s then return false, "a session", expect.reply(req) end
  local marks, outcome = start_sleepers(conn, s)
  if not marks then return table.unpack(outcome) end
  local answer = end_it(conn)
  local exited = conn:wait_exit(VANISH_TIMEOUT)
  local ok, left = gone(marks)
  local clean = exited and conn.exit_code == 0 and (answer == nil or expect.is_result(answer))
  return ok and clean, expected, string.format("%sprovider %s; %s",
    answer and ("shutdown " .. expect.reply(answer) .. "; ") or "", conn:exit_status(), left)
end

local function shutdown_ends(ctx)
  return provider_ends(ctx, function(conn) return conn:call("shutdown", {}) end,
    "shutdown answers {}, the provider exits 0, both sleeps gone")
end

local function eof_ends(ctx)
  return provider_ends(ctx, function(conn) conn:close_stdin() end,
    "the provider exits 0 at end of input, both sleeps gone")
end

return {
  sweep = sweep,
  -- close_answers_exec last: a provider that serves one request at a time
  -- is stuck behind that exec for good.
  {name = "lifecycle", checks = {
    {"close kills the session's processes, children included", close_kills},
    {"close removes the session's files", close_removes_files},
    {"shutdown kills the processes of open sessions, answers {} and exits 0", shutdown_ends},
    {"end of input kills the processes of open sessions and exits 0", eof_ends},
    {"close answers an exec still in flight", close_answers_exec},
  }},
}
