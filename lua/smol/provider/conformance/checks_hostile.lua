-- Conformance checks: what code inside a session can do to its provider
-- through the files and processes it makes. A file name that is not UTF-8
-- must not make a reply invalid JSON; a FIFO must not freeze the provider;
-- a process that never reads its stdin must not make it queue without
-- bound (docs/protocol.md, sections 4 and 5).
local core = require "smol.core"
local expect = require "smol.provider.conformance.expect"
local wire = require "smol.provider.conformance.wire"

local b64 = core.b64encode

-- Runs a shell script in the session; true when it exited 0.
local function sh(ctx, script)
  local req = ctx:exec({"sh", "-c", script})
  return expect.is_result(req) and req.result.exit_code == 0, req
end

local function entry_named(entries, bytes, prefix)
  for _, e in ipairs(type(entries) == "table" and entries or {}) do
    if type(e) == "table" and e.name_base64 and core.b64decode(e.name_base64) == bytes then return e end
    if type(e) == "table" and not e.name_base64 and type(e.name) == "string" and e.name:sub(1, #prefix) == prefix then
      return e
    end
  end
end

local function raw_file_name(ctx)
  local prefix = "raw-" .. ctx.env.token .. "-"
  local bytes = prefix .. "\255\254"
  local made, mk = sh(ctx, "printf x > \"$(printf '" .. prefix .. "\\377\\376')\"")
  if not made then return false, "a command creates the file", expect.reply(mk) end
  local before = #ctx.conn.violations
  local list = ctx:op("list_dir", {path = "."})
  local entry = expect.is_result(list) and entry_named(list.result.entries, bytes, prefix)
  local raw = ctx:has("raw_names")
  local stat = raw and ctx:op("stat", {path_base64 = b64(bytes)})
  -- an error echoing such a path must stay valid UTF-8 too
  local missing = raw and ctx:op("read_file", {path_base64 = b64(bytes .. "-missing\255")})
  sh(ctx, "rm -f ./" .. prefix .. "*")
  local bad_line = ctx.conn.violations[before + 1]
  local ok = entry and not bad_line and (not raw or (expect.is_result(stat) and stat.result.type == "file"
    and expect.error_code(missing) == "not_found"))
  return ok, "list_dir in valid UTF-8 JSON, the name exactly in name_base64 (with raw_names: stat "
      .. "by path_base64 answers type file, read_file of a missing such path not_found)",
    (bad_line or (entry and expect.show(entry) or "no such entry in " .. expect.reply(list)))
      .. (raw and "; stat: " .. expect.reply(stat) .. "; read_file: " .. expect.reply(missing) or "")
end

-- Seconds a FIFO request may take: an answer at once is expected, not a wait.
local FIFO_WAIT = 5

local function fifo(ctx)
  local name = "fifo-" .. ctx.env.token
  local made, mk = sh(ctx, "mkfifo " .. name)
  if not made then return false, "a command makes the FIFO", expect.reply(mk) end
  local read = ctx:send_op("read_file", {path = name})
  local write = ctx:send_op("write_file", {path = name, content_base64 = b64("x")})
  local seed = ctx:op("read_file", {path = "seed.txt"}, {timeout = FIFO_WAIT})
  ctx.conn:wait(read, FIFO_WAIT)
  ctx.conn:wait(write, FIFO_WAIT)
  if seed.done then sh(ctx, "rm -f " .. name) end
  local ok = expect.is_result(seed) and expect.error_code(read) ~= nil and expect.error_code(write) ~= nil
  return ok, "an error for read_file and write_file of a FIFO within " .. FIFO_WAIT
      .. "s, read_file seed.txt answered meanwhile",
    "read_file: " .. expect.reply(read) .. "; write_file: " .. expect.reply(write)
      .. "; seed.txt: " .. expect.reply(seed)
end

-- write_stdin requests sent at once to a process that reads nothing, and their size.
local STDIN_WRITES, STDIN_CHUNK = 24, 1024 * 1024

-- How the writes came out: results, limit_exceeded, other errors, still waiting.
local function tally(writes)
  local t = {result = 0, limit_exceeded = 0, other = 0, waiting = 0}
  for _, w in ipairs(writes) do
    local code = expect.error_code(w)
    if not w.done then t.waiting = t.waiting + 1
    elseif code == "limit_exceeded" then t.limit_exceeded = t.limit_exceeded + 1
    elseif code then t.other = t.other + 1
    else t.result = t.result + 1 end
  end
  return t
end

local function stdin_backpressure(ctx)
  local req = ctx:op("spawn", ctx:exec_params({"sh", "-c", "exec sleep 30"}))
  local pid = expect.is_result(req) and req.result.process_id
  if not pid then return false, "spawn answers a process_id", expect.reply(req) end
  local data, writes = b64(string.rep("w", STDIN_CHUNK)), {}
  for i = 1, STDIN_WRITES do
    writes[i] = ctx:send_op("write_stdin", {process_id = pid, data_base64 = data})
  end
  local seed = ctx:op("read_file", {path = "seed.txt"})
  wire.wait_until(function() return tally(writes).waiting == 0 end, 3)
  local t = tally(writes)
  ctx:op("kill", {process_id = pid, signal = "KILL"})
  ctx:op("wait", {process_id = pid}, {timeout = 5})
  for _, w in ipairs(writes) do ctx.conn:wait(w, 5) end
  local ok = expect.is_result(seed) and t.result < STDIN_WRITES and (t.limit_exceeded > 0 or t.waiting > 0)
  return ok, ("of %d writes of 1 MiB to a process that reads nothing, some limit_exceeded or still "
      .. "waiting; other requests served meanwhile"):format(STDIN_WRITES),
    ("%d answered {}, %d limit_exceeded, %d other errors, %d waiting; read_file seed.txt: %s"):format(
      t.result, t.limit_exceeded, t.other, t.waiting, expect.reply(seed))
end

return {
  {name = "hostile files", checks = {
    {"a file name that is not UTF-8 is listed in valid UTF-8 JSON, exactly in name_base64",
      raw_file_name, needs = "fs_extra"},
    {"read_file and write_file of a FIFO get an error at once; other requests are served meanwhile", fifo},
    {"write_stdin to a process that never reads is pushed back, not queued without bound",
      stdin_backpressure, needs = "process"},
  }},
}
