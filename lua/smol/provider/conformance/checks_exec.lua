-- Conformance checks: exec and spawn (part 1), binary fidelity, concurrency.
local core = require "smol.core"
local expect = require "smol.provider.conformance.expect"
local event_rules = require "smol.provider.conformance.event_rules"
local hostside = require "smol.provider.conformance.hostside"
local group_run = require "smol.provider.conformance.group_run"
local wire = require "smol.provider.conformance.wire"

local b64 = core.b64encode

local function stdout_of(req)
  if not expect.is_result(req) then return nil, expect.reply(req) end
  return event_rules.field(req.result, "stdout")
end

-- ok when req is an exec result with `exit_code` whose events follow the rules.
local function exec_shape(req, exit_code)
  if not expect.is_result(req) then return false, expect.reply(req) end
  local problem = event_rules.exec_problem(req) or event_rules.output_problem(req)
  if problem then return false, problem end
  if exit_code and req.result.exit_code ~= exit_code then
    return false, "exit_code " .. expect.show(req.result.exit_code)
  end
  return true
end

local function exec_basic(ctx)
  local req = ctx:exec({"sh", "-c", "printf out; printf err >&2; exit 3"})
  local ok, problem = exec_shape(req, 3)
  local out, err = event_rules.field(req.result, "stdout"), event_rules.field(req.result, "stderr")
  ok = ok and out == "out" and err == "err"
  return ok, 'exit_code 3, stdout "out", stderr "err"', problem or expect.reply(req)
end

local function event_order(ctx)
  local req = ctx:exec({"sh", "-c", "echo o1; echo e1 >&2; echo o2; echo e2 >&2"})
  local ok, problem = exec_shape(req, 0)
  return ok, "started, stdout/stderr..., exited, result; output equal in both",
    problem or ("events [" .. event_rules.types_of(req) .. "]")
end

-- The first chunk must arrive while the command still runs, not at its end.
local function streams_early(ctx)
  local first_at
  local req = ctx:op("exec", ctx:exec_params({"sh", "-c", "echo early; sleep 0.6; echo late"}),
    {on_event = function(ev)
      if ev.type == "stdout" and not first_at then first_at = core.now() end
    end})
  local done_at = core.now()
  if not exec_shape(req, 0) then return false, "a result", expect.reply(req) end
  local lead = first_at and (done_at - first_at) or 0
  return lead >= 0.3, "the first stdout event at least 0.3s before the result",
    string.format("%.3fs before", lead)
end

local function file_to_stdout(ctx)
  local data = hostside.all_bytes()
  ctx:op("write_file", {path = "fidelity.bin", content_base64 = b64(data)})
  local out, err = stdout_of(ctx:exec({"cat", "fidelity.bin"}))
  return expect.equal(data, out or err, "stdout")
end

local function stdin_to_stdout(ctx)
  local data = hostside.all_bytes()
  local out, err = stdout_of(ctx:exec({"cat"}, {stdin_base64 = b64(data)}))
  return expect.equal(data, out or err, "stdout")
end

local function stdin_to_file(ctx)
  local data = hostside.all_bytes()
  local req = ctx:exec({"sh", "-c", "cat > from-stdin.bin"}, {stdin_base64 = b64(data)})
  if not exec_shape(req, 0) then return false, "exit_code 0", expect.reply(req) end
  local r = ctx:op("read_file", {path = "from-stdin.bin"})
  local got = expect.is_result(r) and event_rules.field(r.result, "content")
  return expect.equal(data, got or expect.reply(r), "file")
end

-- 1 MiB of varied bytes, so a chunking or base64 boundary bug shows.
local function big_payload()
  local parts, x = {}, 12345
  for i = 1, 131072 do
    x = (x * 1103515245 + 12345) % 2147483648
    parts[i] = string.pack("<I4I4", x, x ~ i)
  end
  return table.concat(parts)
end

local function big_output(ctx)
  local data = big_payload()
  ctx:op("write_file", {path = "big.bin", content_base64 = b64(data)})
  local req = ctx:exec({"cat", "big.bin"})
  local ok, problem = exec_shape(req, 0)
  local streamed = event_rules.collected(req, "stdout")
  ok = ok and streamed == data
  return ok, "1048576 bytes, identical in events and result",
    problem or string.format("%d bytes streamed, equal: %s", streamed and #streamed or 0,
      tostring(streamed == data))
end

local function null_stdin(ctx)
  local req = ctx:exec({"cat"}, nil, 5)
  local ok, problem = exec_shape(req, 0)
  local out = event_rules.field(req.result, "stdout")
  return ok and out == "", 'cat exits 0 at once with stdout ""', problem or expect.reply(req)
end

local function exec_cwd(ctx)
  ctx:op("create_dir_all", {path = "cwd-dir"})
  local out, err = stdout_of(ctx:exec({"pwd"}, {cwd = "cwd-dir"}))
  return (out or ""):match("/cwd%-dir\n$") ~= nil, 'stdout ending in "/cwd-dir\\n"',
    expect.show(out or err)
end

local function exec_env(ctx)
  local out, err = stdout_of(ctx:exec({"sh", "-c", 'printf %s "$SMOLWF_CHECK"'},
    {env = {SMOLWF_CHECK = "a value with spaces"}}))
  return expect.equal("a value with spaces", out or err, "stdout")
end

local function no_env_leak(ctx)
  local out, err = stdout_of(ctx:exec({"env"}))
  if not out then return false, "the output of `env`", err end
  local leaked = out:find(group_run.LEAK_NAME, 1, true) or out:find(ctx:leak_value(), 1, true)
  return not leaked, "no " .. group_run.LEAK_NAME .. " (set in the provider's environment)",
    leaked and ("seen: " .. expect.show(out:match("[^\n]*" .. group_run.LEAK_NAME .. "[^\n]*")
      or out)) or "not seen"
end

local function killed_by_signal(ctx)
  return expect.all("exit_code 128+signo", {
    {"KILL", function()
      local req = ctx:exec({"sh", "-c", "kill -KILL $$"})
      local ok, problem = exec_shape(req, 137)
      return ok, "exit_code 137", problem or expect.reply(req)
    end},
    {"TERM", function()
      local req = ctx:exec({"sh", "-c", "kill -TERM $$"})
      local ok, problem = exec_shape(req, 143)
      return ok, "exit_code 143", problem or expect.reply(req)
    end},
  })
end

local function missing_program(ctx)
  local name = "no-such-program-" .. ctx.env.token
  local req = ctx:exec({name})
  if expect.error_code(req) then
    local msg = tostring(req.error.message)
    return msg:find(name, 1, true) ~= nil, "exit 127 or an error naming " .. name, expect.reply(req)
  end
  local err = event_rules.field(req.result, "stderr") or ""
  local ok = exec_shape(req, 127) and err:find(name, 1, true) ~= nil
  return ok, "exit_code 127 and stderr naming " .. name, expect.reply(req)
end

local function spawn_shape(ctx)
  local req = ctx:op("spawn", ctx:exec_params({"sh", "-c", "exit 0"}))
  if not expect.is_result(req) then return expect.result(req, "{process_id}") end
  local problem = event_rules.spawn_problem(req)
  local id_ok = type(req.result.process_id) == "string"
  return id_ok and not problem, "events [started], result {process_id: string}",
    problem or expect.reply(req)
end

--[[
A long exec (blocked reading a FIFO) must not delay a read_file sent after
it. A second exec then opens the FIFO, which lets the first one finish; a
provider that serves one request at a time fails on the read_file first.
]]
local function long_exec_does_not_block(ctx)
  local gate = "gate-" .. ctx.env.token
  local mk = ctx:exec({"mkfifo", gate})
  if not exec_shape(mk, 0) then return false, "mkfifo gate succeeds", expect.reply(mk) end
  local long = ctx:send_op("exec", ctx:exec_params({"cat", gate}))
  local read = ctx:op("read_file", {path = "seed.txt"}, {timeout = 2})
  local read_first = expect.is_result(read) and not long.done
  if not read.done then   -- the provider is stuck behind the exec: no point going on
    return false, "read_file answered while the exec waits", expect.reply(read)
  end
  local opener = ctx:exec({"sh", "-c", "echo go > " .. gate}, nil, 5)
  ctx.conn:wait(long, 5)
  local ok = read_first and exec_shape(opener, 0) and stdout_of(long) == "go\n"
  return ok, "read_file answered while the exec waits; both execs then finish",
    string.format("read_file: %s (the exec still running then: %s); exec: %s",
      expect.reply(read), tostring(read_first), expect.reply(long))
end

local function many_in_flight(ctx)
  local reqs = {}
  for i = 1, 16 do
    reqs[i] = ctx:send_op("exec", ctx:exec_params({"sh", "-c", "echo " .. i .. "; echo e" .. i .. " >&2"}))
  end
  local all_done = wire.wait_until(function()
    for _, req in ipairs(reqs) do if not req.done then return false end end
    return true
  end, wire.DEFAULT_TIMEOUT)
  local bad = all_done and {} or {"not all answered within " .. wire.DEFAULT_TIMEOUT .. "s"}
  for i, req in ipairs(reqs) do
    local err = expect.is_result(req) and event_rules.field(req.result, "stderr")
    if not exec_shape(req, 0) or stdout_of(req) ~= i .. "\n" or err ~= "e" .. i .. "\n" then
      bad[#bad + 1] = "exec " .. i .. ": " .. expect.reply(req)
    end
  end
  return #bad == 0, "16 execs in flight each answer their own output",
    #bad == 0 and "all 16 did" or table.concat(bad, "; ")
end

return {
  {name = "exec", checks = {
    {"exec answers stdout, stderr and a non-zero exit code as a result", exec_basic},
    {"exec events are started, output..., exited, then the result", event_order},
    {"exec streams output while the command runs", streams_early},
    {"all 256 byte values: file -> command -> stdout", file_to_stdout},
    {"all 256 byte values: stdin -> command -> stdout", stdin_to_stdout},
    {"all 256 byte values: stdin -> command -> file", stdin_to_file},
    {"1 MiB of output arrives whole in events and result", big_output},
    {"exec with null stdin reads an empty, closed stdin", null_stdin},
    {"exec cwd resolves against the session cwd", exec_cwd},
    {"exec env adds variables to the command", exec_env},
    {"the provider's own environment does not leak into commands", no_env_leak},
    {"a command killed by a signal exits 128+signo", killed_by_signal},
    {"a program that does not exist exits 127 naming it", missing_program},
    {"spawn answers started, then {process_id}", spawn_shape},
  }},
  -- many_in_flight first: a provider stuck behind the long exec cannot answer it.
  {name = "concurrency", checks = {
    {"16 execs in flight each get their own output", many_in_flight},
    {"a long exec does not delay a later read_file", long_exec_does_not_block},
  }},
}
