-- Conformance checks: the part-2 extensions, each run only when the session
-- announces its capability.
local core = require "smol.core"
local expect = require "smol.provider.conformance.expect"
local event_rules = require "smol.provider.conformance.event_rules"
local hostside = require "smol.provider.conformance.hostside"
local wire = require "smol.provider.conformance.wire"

local b64, null = core.b64encode, wire.null

local function out_of(req, stream)
  if not expect.is_result(req) then return nil end
  return event_rules.field(req.result, stream or "stdout")
end

local function spawn(ctx, script, extra)
  local req = ctx:op("spawn", ctx:exec_params({"sh", "-c", script}, extra))
  return expect.is_result(req) and req.result.process_id, req
end

-- wait's events: output (and dropped markers), then exited when it ended.
local function wait_problem(req, running)
  local evs, n = req.events, #req.events
  for i = 1, running and n or n - 1 do
    local t = type(evs[i]) == "table" and evs[i].type
    if t ~= "stdout" and t ~= "stderr" and t ~= "dropped" then
      return "event " .. i .. " is " .. tostring(t) .. ": [" .. event_rules.types_of(req) .. "]"
    end
  end
  if not running and (n == 0 or evs[n].type ~= "exited") then
    return "last event is not exited: [" .. event_rules.types_of(req) .. "]"
  end
  return event_rules.output_problem(req)
end

-- ======================================================================
-- process
-- ======================================================================

local function write_stdin_then_wait(ctx)
  local pid, sreq = spawn(ctx, 'read line; echo "got:$line"')
  if not pid then return false, "spawn answers a process_id", expect.reply(sreq) end
  local w = ctx:op("write_stdin", {process_id = pid, data_base64 = b64("hello\n"), eof = true})
  local req = ctx:op("wait", {process_id = pid})
  local problem
  if expect.is_result(w) then problem = wait_problem(req)
  else problem = "write_stdin answered " .. expect.reply(w) end
  local ok = not problem and req.result.exit_code == 0 and out_of(req) == "got:hello\n"
  return ok, 'write_stdin {}; wait: output, exited, exit_code 0, stdout "got:hello\\n"',
    problem or expect.reply(req)
end

--[[
wait with timeout_ms answers running while the process runs; repeated
until "one\n" has come (however slow this machine is), then the process
is let go and the last wait must carry only what came after: "two\n".
]]
local function wait_running_then_rest(ctx)
  local pid, sreq = spawn(ctx, "echo one; read x; echo two")
  if not pid then return false, "spawn answers a process_id", expect.reply(sreq) end
  local early, bad = {}, nil
  for _ = 1, 20 do
    local w = ctx:op("wait", {process_id = pid, timeout_ms = 200})
    if not (expect.is_result(w) and w.result.running == true) or wait_problem(w, true) then
      bad = "a wait answered " .. expect.reply(w)
      break
    end
    early[#early + 1] = out_of(w)
    if table.concat(early) == "one\n" then break end
  end
  ctx:op("write_stdin", {process_id = pid, eof = true})
  local last = ctx:op("wait", {process_id = pid})
  local ok = not bad and table.concat(early) == "one\n" and expect.is_result(last)
    and out_of(last) == "two\n" and not wait_problem(last)
  return ok, 'waits {running: true} delivering "one\\n", then a last wait with only "two\\n"',
    bad or string.format("early waits delivered %s; last %s", expect.show(table.concat(early)),
      expect.reply(last))
end

local function spawn_with_stdin(ctx)
  local pid, sreq = spawn(ctx, "cat", {stdin_base64 = b64("fed to stdin")})
  if not pid then return false, "spawn answers a process_id", expect.reply(sreq) end
  local req = ctx:op("wait", {process_id = pid}, {timeout = 5})
  return expect.equal("fed to stdin", out_of(req) or expect.reply(req), "stdout")
end

local DROP_TOTAL, DROP_KEEP = 3 * 1024 * 1024, 1024 * 1024

-- Bytes dropped and output delivered by a wait, or nil and what was wrong.
local function dropped_and_kept(req)
  local dropped, first_output = 0, nil
  for i, ev in ipairs(req.events) do
    if ev.type == "dropped" then
      if first_output or ev.stream ~= "stdout" then return nil, "dropped event " .. i .. " misplaced" end
      dropped = dropped + (tonumber(ev.bytes) or 0)
    elseif ev.type == "stdout" then
      first_output = first_output or i
    end
  end
  return dropped, event_rules.collected(req, "stdout")
end

--[[
Output nobody waited for is kept up to 1 MiB per stream: a process writes
3 MiB, finishes (a file it writes last says so), and only then is waited:
a `dropped` event first, then the newest bytes, all adding up.
]]
local function spawned_output_bounded(ctx)
  local done_file = "drop-done-" .. ctx.env.token
  local pid, sreq = spawn(ctx, "head -c " .. DROP_TOTAL .. " /dev/zero; : > " .. done_file)
  if not pid then return false, "spawn answers a process_id", expect.reply(sreq) end
  for _ = 1, 200 do   -- up to 10 s
    if expect.is_result(ctx:op("read_file", {path = done_file})) then break end
    wire.sleep(0.05)
  end
  local req = ctx:op("wait", {process_id = pid})
  local dropped, kept = dropped_and_kept(req)
  local ok = dropped and kept and #kept <= DROP_KEEP and #kept > 0
    and dropped + #kept == DROP_TOTAL and not wait_problem(req)
  return ok, "dropped {stream: stdout, bytes: N} first, then at most 1 MiB; N + kept = 3 MiB",
    string.format("dropped %s, kept %s bytes; events [%s]", expect.show(dropped),
      kept and #kept or tostring(kept), event_rules.types_of(req):sub(1, 80))
end

local function kill_then_wait(ctx, signal, code)
  local pid, sreq = spawn(ctx, "exec sleep 30")
  if not pid then return false, "spawn answers a process_id", expect.reply(sreq) end
  local k = ctx:op("kill", {process_id = pid, signal = signal})
  local req = ctx:op("wait", {process_id = pid}, {timeout = 5})
  local ok = expect.is_result(k) and expect.is_result(req) and req.result.exit_code == code
  return ok, "kill {}; wait exit_code " .. code, expect.reply(k) .. "; " .. expect.reply(req), pid
end

local function kill_kill(ctx)
  return kill_then_wait(ctx, "KILL", 137)
end

local function kill_default_term(ctx)
  return kill_then_wait(ctx, nil, 143)
end

local function forgotten_after_exit(ctx)
  local ok, exp, got, pid = kill_then_wait(ctx, "KILL", 137)
  if not ok then return ok, exp, got end
  return expect.all("unknown_process for both", {
    {"wait", function() return expect.error(ctx:op("wait", {process_id = pid}), "unknown_process") end},
    {"kill", function() return expect.error(ctx:op("kill", {process_id = pid}), "unknown_process") end},
  })
end

local function unknown_process(ctx)
  local id = "no-such-process-" .. ctx.env.token
  return expect.all("unknown_process for each", {
    {"wait", function() return expect.error(ctx:op("wait", {process_id = id}), "unknown_process") end},
    {"kill", function() return expect.error(ctx:op("kill", {process_id = id}), "unknown_process") end},
    {"write_stdin", function()
      return expect.error(ctx:op("write_stdin", {process_id = id, eof = true}), "unknown_process")
    end},
  })
end

-- ======================================================================
-- timeout, signal, output_limit
-- ======================================================================

local function timed(ctx, script, extra, want_kind)
  local started = core.now()
  local req = ctx:exec({"sh", "-c", script}, extra, 10)
  local took = core.now() - started
  local ok = expect.is_result(req) and req.result.timed_out == want_kind and took < 5
  return ok, req, string.format("%s after %.2fs", expect.reply(req), took)
end

local function wall_timeout(ctx)
  local ok, req, got = timed(ctx, "echo before; sleep 30", {timeout_ms = 300}, "wall")
  ok = ok and out_of(req) == "before\n" and req.result.exit_code == 143
  return ok, 'timed_out "wall", stdout "before\\n", exit_code 143, within 5s', got
end

local function idle_timeout(ctx)
  local ok, req, got = timed(ctx, "echo x; sleep 30", {idle_timeout_ms = 300}, "idle")
  ok = ok and out_of(req) == "x\n"
  return ok, 'timed_out "idle", stdout "x\\n", within 5s', got
end

local function kill_after_grace(ctx)
  local ok, req, got = timed(ctx, "trap '' TERM; echo ready; sleep 30",
    {timeout_ms = 300, kill_grace_ms = 300}, "wall")
  ok = ok and req.result.exit_code == 137
  return ok, 'TERM ignored: timed_out "wall", exit_code 137 after the grace, within 5s', got
end

local function spawn_timeout(ctx)
  local started = core.now()
  local pid, sreq = spawn(ctx, "echo before; exec sleep 30", {timeout_ms = 300})
  if not pid then return false, "spawn answers a process_id", expect.reply(sreq) end
  local req = ctx:op("wait", {process_id = pid}, {timeout = 10})
  local took = core.now() - started
  local r = expect.is_result(req) and req.result or {}
  local ok = r.timed_out == "wall" and r.exit_code == 143 and out_of(req) == "before\n" and took < 5
  return ok, 'wait: timed_out "wall", exit_code 143, stdout "before\\n", within 5s',
    string.format("%s after %.2fs", expect.reply(req), took)
end

local function signal_named(ctx, sig, code)
  return {sig, function()
    local req = ctx:exec({"sh", "-c", "kill -" .. sig .. " $$"})
    local evs = req.events
    local exited = evs[#evs]
    local ok = expect.is_result(req) and req.result.signal == sig and req.result.exit_code == code
      and type(exited) == "table" and exited.type == "exited" and exited.signal == sig
    return ok, string.format('exited and result {signal: "%s", exit_code: %d}', sig, code),
      "last event " .. expect.show(exited) .. ", " .. expect.reply(req)
  end}
end

local function signal_names(ctx)
  return expect.all("the signal named in both", {signal_named(ctx, "KILL", 137),
    signal_named(ctx, "TERM", 143)})
end

local function no_signal_on_exit(ctx)
  local req = ctx:exec({"sh", "-c", "exit 2"})
  local sig = expect.is_result(req) and req.result.signal
  local ok = expect.is_result(req) and (sig == nil or sig == null) and req.result.exit_code == 2
  return ok, "exit_code 2 and no signal", expect.reply(req)
end

-- max_output_bytes 0: no copy at all (how a client streams without capturing).
local function output_not_captured(ctx)
  local req = ctx:exec({"head", "-c", "5000", "/dev/zero"}, {max_output_bytes = 0})
  local r = expect.is_result(req) and req.result or {}
  local kept, streamed = out_of(req), event_rules.collected(req, "stdout")
  local ok = kept == "" and r.stdout_truncated == true and streamed and #streamed == 5000
  return ok, "stdout: 0 bytes kept, truncated, 5000 streamed",
    string.format("%s bytes kept (truncated %s), %s streamed", kept and #kept or "?",
      tostring(r.stdout_truncated), streamed and #streamed or "?")
end

local function output_capped(ctx)
  local req = ctx:exec({"sh", "-c", "head -c 10000 /dev/zero; head -c 20 /dev/zero >&2"},
    {max_output_bytes = 1000})
  local r = expect.is_result(req) and req.result or {}
  local out, err = out_of(req), out_of(req, "stderr")
  local streamed = event_rules.collected(req, "stdout")
  local ok = out and #out == 1000 and r.stdout_truncated == true and err and #err == 20
    and r.stderr_truncated ~= true and streamed and #streamed == 10000
  return ok, "stdout: 1000 bytes kept, truncated, 10000 streamed; stderr: 20 bytes, not truncated",
    string.format("stdout %s bytes kept (truncated %s), %s streamed; stderr %s bytes (truncated %s)",
      out and #out or "?", tostring(r.stdout_truncated), streamed and #streamed or "?",
      err and #err or "?", tostring(r.stderr_truncated))
end

-- ======================================================================
-- raw_output
-- ======================================================================

-- Bytes a line reader would split or a JSON reader would choke on.
local AWKWARD = "a\nb\"c\0d\255e\r\n{\"id\":1}\n"
local AWKWARD_PRINTF = "a\\nb\"c\\0d\\377e\\r\\n{\"id\":1}\\n"

local function framed_events(req, stream)
  local n = 0
  for _, ev in ipairs(req.events or {}) do
    if ev.type == stream and ev.framed then n = n + 1 end
  end
  return n
end

-- With raw_output the output may come as frames; either way it is exactly the bytes.
local function frames_exact(ctx)
  local req = ctx:exec({"sh", "-c", "printf '" .. AWKWARD_PRINTF .. "'; printf '" .. AWKWARD_PRINTF .. "' >&2"},
    {raw_output = true, max_output_bytes = 0})
  local out, err = event_rules.collected(req, "stdout"), event_rules.collected(req, "stderr")
  local ok = expect.is_result(req) and out == AWKWARD and err == AWKWARD
  return ok, "stdout and stderr: exactly the bytes written, framed or not",
    string.format("stdout %s, stderr %s (%d and %d frames)", expect.show(out), expect.show(err),
      framed_events(req, "stdout"), framed_events(req, "stderr"))
end

-- A request that did not ask gets no frames (the wire notes any as a violation).
local function no_frames_unasked(ctx)
  local req = ctx:exec({"printf", AWKWARD_PRINTF}, {max_output_bytes = 0})
  local out = event_rules.collected(req, "stdout")
  local ok = expect.is_result(req) and out == AWKWARD and framed_events(req, "stdout") == 0
  return ok, "base64 events only, holding exactly the bytes",
    string.format("%s in %d frames", expect.show(out), framed_events(req, "stdout"))
end

-- ======================================================================
-- fs_extra
-- ======================================================================

local function stat_file(ctx)
  local w = ctx:op("write_file", {path = "stat.txt", content_base64 = b64("12345"), mode = 416})
  local req = ctx:op("stat", {path = "stat.txt"})
  local r = expect.is_result(req) and req.result or {}
  local recent = type(r.mtime) == "number" and math.abs(r.mtime - core.time()) < 3600
  local ok = expect.is_result(w) and r.type == "file" and r.size == 5 and r.mode == 416 and recent
  return ok, '{type: "file", size: 5, mode: 416, mtime: now}', expect.reply(req)
end

local function stat_kinds(ctx)
  ctx:op("write_file", {path = "target.txt", content_base64 = b64("x")})
  ctx:exec({"ln", "-s", "target.txt", "stat-link"})
  local function kind(path, want)
    return {path, function()
      local req = ctx:op("stat", {path = path})
      return expect.is_result(req) and req.result.type == want, "type " .. want, expect.reply(req)
    end}
  end
  return expect.all("symlink (not followed), dir, not_found", {
    kind("stat-link", "symlink"), kind("sub", "dir"),
    {"missing", function()
      return expect.error(ctx:op("stat", {path = "no-such-" .. ctx.env.token}), "not_found")
    end},
  })
end

local function list_dir(ctx)
  ctx:op("create_dir_all", {path = "ld/subdir"})
  ctx:op("write_file", {path = "ld/a.txt", content_base64 = b64("abc")})
  local req = ctx:op("list_dir", {path = "ld"})
  local entries = expect.is_result(req) and req.result.entries
  local seen = {}
  for _, e in ipairs(type(entries) == "table" and entries or {}) do
    seen[#seen + 1] = string.format("%s:%s:%s", e.name, e.type,
      e.type == "file" and tostring(math.tointeger(e.size) or e.size) or "-")
  end
  table.sort(seen)
  return expect.equal("a.txt:file:3 subdir:dir:-", table.concat(seen, " "), "entries")
end

local function read_range(ctx)
  local data = hostside.all_bytes()
  ctx:op("write_file", {path = "range.bin", content_base64 = b64(data)})
  local function range(offset, length, want_eof)
    return {offset .. "+" .. length, function()
      local req = ctx:op("read_file", {path = "range.bin", offset = offset, length = length})
      local got = out_of(req, "content")
      local want = data:sub(offset + 1, offset + length)
      local ok = got == want and req.result.eof == want_eof
      return ok, expect.show(want) .. " eof " .. tostring(want_eof), expect.reply(req)
    end}
  end
  return expect.all("the range and eof", {range(10, 20, false), range(250, 100, true)})
end

local function append(ctx)
  ctx:op("write_file", {path = "append.txt", content_base64 = b64("ab")})
  local w = ctx:op("write_file", {path = "append.txt", content_base64 = b64("cd"), append = true})
  local r = ctx:op("read_file", {path = "append.txt"})
  return expect.equal("abcd", expect.is_result(w) and out_of(r, "content") or expect.reply(w))
end

local function fs_extra_escapes(ctx)
  ctx:exec({"ln", "-s", "/", "fs-rootlink"})
  local function denied(method, path)
    return {method .. " " .. path, function()
      return expect.error(ctx:op(method, {path = path}), "permission_denied")
    end}
  end
  return expect.all("permission_denied for each", {
    denied("stat", "../x"), denied("list_dir", "/etc"), denied("list_dir", "fs-rootlink"),
    denied("stat", "fs-rootlink/etc/passwd"), denied("list_dir", ".."),
  })
end

-- ======================================================================
-- describe, isolation
-- ======================================================================

local function describe(ctx)
  local req = ctx.conn:call("describe", {})
  local r = expect.is_result(req) and req.result or {}
  local names, ok = {}, type(r.provider) == "string" and type(r.version) == "string"
    and r.protocol == 1 and type(r.profiles) == "table" and #r.profiles > 0
  for _, p in ipairs(type(r.profiles) == "table" and r.profiles or {}) do
    ok = ok and type(p.name) == "string" and p.name:match("^[^/]+/[^/]+$") ~= nil
      and type(p.isolation) == "string" and type(p.network) == "boolean"
    names[tostring(p.name)] = true
  end
  local wanted = ctx.env.profile.provider .. "/" .. ctx.env.profile.name
  ok = ok and names[wanted]
  return ok, "{provider, version, protocol: 1, profiles: [{name: P/N, isolation, network}...]}"
    .. " listing " .. wanted, expect.reply(req)
end

local function isolation_value(ctx)
  local iso = ctx:caps().isolation
  return iso == "namespaces" or iso == "none", '"namespaces" or "none"', expect.show(iso)
end

local function no_network(ctx)
  if ctx:caps().network ~= false then return "skip", "the session does not say network: false" end
  local out = out_of(ctx:exec({"cat", "/proc/net/dev"})) or ""
  local names = {}
  for name in out:gmatch("\n%s*([^%s:]+):") do
    if name ~= "lo" then names[#names + 1] = name end
  end
  return #names == 0, "no network interface but lo", #names == 0 and "only lo"
    or ("interfaces: " .. table.concat(names, ", "))
end

local function host_processes_hidden(ctx)
  if ctx:caps().isolation ~= "namespaces" then return "skip", 'isolation is not "namespaces"' end
  local mine = (hostside.read("/proc/self/stat") or ""):match("^(%d+)")
  local req = ctx:exec({"sh", "-c", "test -e /proc/" .. mine .. "/cmdline && echo visible || echo hidden"})
  return expect.equal("hidden\n", out_of(req) or expect.reply(req), "the kit's pid " .. mine)
end

-- ======================================================================
-- session_by_id
-- ======================================================================

-- Each method that names a session serves {"id"} alone as it serves the whole object.
local function session_named_by_id(ctx)
  local by_id = {id = ctx.session.id}
  local text = "by id " .. ctx.env.token
  return expect.all("{id} alone serves as the session", {
    {"write_file", function()
      return expect.result(ctx:op("write_file", {session = by_id, path = "by-id.txt", content_base64 = b64(text)}))
    end},
    {"read_file", function()
      local req = ctx:op("read_file", {session = by_id, path = "by-id.txt"})
      return expect.equal(text, out_of(req, "content") or expect.reply(req), "content")
    end},
    {"exec", function()
      local req = ctx:exec({"cat", "by-id.txt"}, {session = by_id})
      return expect.equal(text, out_of(req) or expect.reply(req), "stdout")
    end},
  })
end

local function unknown_id(ctx)
  local req = ctx:op("read_file", {session = {id = "no-such-session-" .. ctx.env.token}, path = "x"})
  return expect.error(req, "unknown_session")
end

return {
  {name = "session_by_id", needs = "session_by_id", checks = {
    {"a request naming its session by {\"id\"} alone is served", session_named_by_id},
    {"{\"id\"} of a session never opened is unknown_session", unknown_id},
  }},
  {name = "process", needs = "process", checks = {
    {"write_stdin reaches a spawned command; wait answers its output and exit", write_stdin_then_wait},
    {"wait with timeout_ms answers running, then each byte once", wait_running_then_rest},
    {"spawn with stdin_base64 feeds it, then end of file", spawn_with_stdin},
    {"output nobody waited for is bounded: dropped, then the newest 1 MiB", spawned_output_bounded},
    {"kill KILL ends the process with 137", kill_kill},
    {"kill without a signal sends TERM (143)", kill_default_term},
    {"after wait returned the exit, wait and kill are unknown_process", forgotten_after_exit},
    {"wait, kill and write_stdin of an unknown process_id are unknown_process", unknown_process},
  }},
  {name = "timeout", needs = "timeout", checks = {
    {"timeout_ms ends the command and keeps its output", wall_timeout},
    {"idle_timeout_ms ends a silent command", idle_timeout},
    {"a command ignoring TERM is killed after kill_grace_ms", kill_after_grace},
    {"spawn with timeout_ms is ended too; wait says timed_out", spawn_timeout, needs = "process"},
  }},
  {name = "signal", needs = "signal", checks = {
    {"exited and the result name the signal", signal_names},
    {"a normal exit names no signal", no_signal_on_exit},
  }},
  {name = "output_limit", needs = "output_limit", checks = {
    {"max_output_bytes caps each captured stream; events carry everything", output_capped},
    {"max_output_bytes 0 keeps no copy; events carry everything", output_not_captured},
  }},
  {name = "raw_output", needs = "raw_output", checks = {
    {"with raw_output, output (framed or not) is exactly the bytes written", frames_exact},
    {"without raw_output, no output comes as frames", no_frames_unasked},
  }},
  {name = "fs_extra", needs = "fs_extra", checks = {
    {"stat of a file answers type, size, mode and mtime", stat_file},
    {"stat does not follow a final symlink; dir; missing is not_found", stat_kinds},
    {"list_dir answers names, types and sizes", list_dir},
    {"read_file with offset and length answers the range and eof", read_range},
    {"write_file with append adds to the end", append},
    {"stat and list_dir refuse paths outside the session", fs_extra_escapes},
  }},
  {name = "describe", needs = "describe", checks = {
    {"describe needs no session and describes the provider and its profiles", describe},
  }},
  {name = "isolation", needs = "isolation", checks = {
    {"isolation is \"namespaces\" or \"none\"", isolation_value},
    {"network: false leaves commands no interface but loopback", no_network},
    {"with namespaces, commands do not see this machine's processes", host_processes_hidden},
  }},
}
