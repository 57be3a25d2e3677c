-- Conformance checks: request lines that a lenient decoder would read as
-- something else than was written (a key twice, an id beyond 2^53, NUL,
-- two requests on a line), and echoes that must stay valid UTF-8 JSON.
-- A request either means exactly what its text says or is refused with
-- invalid_request (docs/protocol.md, "Envelope"). Every line a provider
-- writes is checked by the wire itself (wire.lua: on_line); these checks
-- provoke the lines most likely to break that.
local expect = require "smol.provider.conformance.expect"
local wire = require "smol.provider.conformance.wire"

local json = wire.json

-- The session as JSON text, for lines written by hand.
local function session_json(ctx)
  return json.encode(ctx.session)
end

-- Sends a hand-written line expecting replies for `id`, and waits (5 s) for
-- the request's terminal line or an id-null reply. Returns the record.
local function send_hand_written(conn, id, line)
  local nulls = #conn.null_replies
  local req = conn:send_line(id, "?", line)
  wire.wait_until(function() return req.done or #conn.null_replies > nulls or conn.exited end, 5)
  req.null_reply = conn.null_replies[nulls + 1]
  return req
end

-- What a hand-written request came to, as expect.reply says, or its id-null reply.
local function outcome(req)
  if req.done or not req.null_reply then return expect.reply(req) end
  return "id-null reply " .. expect.show(req.null_reply)
end

-- The request was refused: invalid_request by its id, or an id-null error.
local function refused(req)
  local null_code = req.null_reply and type(req.null_reply.error) == "table" and req.null_reply.error.code
  return expect.error_code(req) == "invalid_request" or null_code == "invalid_request"
end

-- The message of the request's error (by id or id null), "" without one.
local function message_of(req)
  local e = req.error or (req.null_reply and req.null_reply.error)
  return type(e) == "table" and type(e.message) == "string" and e.message or ""
end

local function refused_naming(req, word)
  return refused(req) and message_of(req):find(word, 1, true) ~= nil
end

-- Runs fn() and returns, with its results, the protocol violations noted meanwhile.
local function violations_during(conn, fn)
  local before = #conn.violations
  local results = table.pack(fn())
  local new = {}
  for i = before + 1, #conn.violations do new[#new + 1] = conn.violations[i] end
  return new, table.unpack(results, 1, results.n)
end

local function duplicate_keys(ctx)
  -- A fresh provider: one that takes the first `method` shuts down.
  local fresh = ctx:start_provider()
  local top = send_hand_written(fresh, "dup-method",
    '{"id":"dup-method","method":"shutdown","method":"describe","params":{}}')
  local nested = send_hand_written(ctx.conn, "dup-path", ('{"id":"dup-path","method":"read_file",'
    .. '"params":{"session":%s,"path":"seed.txt","path":"no-such-file"}}'):format(session_json(ctx)))
  return expect.all("invalid_request naming the key", {
    {"`method` twice", function()
      return refused_naming(top, "method") and not fresh.exited,
        "invalid_request naming `method`, the provider still running",
        outcome(top) .. "; provider " .. fresh:exit_status()
    end},
    {"`path` twice in params", function()
      return refused_naming(nested, "path"), "invalid_request naming `path`", outcome(nested)
    end},
  })
end

local BIG_ID = "9007199254740993"   -- 2^53 + 1: a double reads it as 2^53

local function big_id(ctx)
  local conn, echoed = ctx.conn, nil
  conn.on_inexact_id = function(line) echoed = line end
  local nulls, strays = #conn.null_replies, #conn.violations
  conn:send_raw('{"id":' .. BIG_ID .. ',"method":"no_such_method_' .. ctx.env.token .. '","params":{}}')
  wire.wait_until(function()
    return echoed or #conn.null_replies > nulls or #conn.violations > strays or conn.exited
  end, 5)
  conn.on_inexact_id = nil
  local null = conn.null_replies[nulls + 1]
  local exact = echoed and echoed:find('^%s*{.-"id"%s*:%s*' .. BIG_ID .. '[%s,}]') ~= nil
  local ok = exact or (null ~= nil and type(null.error) == "table")
  return ok, "a reply with id " .. BIG_ID .. " exactly, or an error with id null",
    echoed and expect.show(echoed) or null and expect.show(null)
      or conn.violations[strays + 1] or "no reply within 5s"
end

local function nul_strings(ctx)
  local token = ctx.env.token
  local id = send_hand_written(ctx.conn, "a\0b", '{"id":"a\\u0000b","method":"no_such_method_' .. token .. '","params":{}}')
  local method = send_hand_written(ctx.conn, "nul-method",
    '{"id":"nul-method","method":"describe\\u0000shutdown","params":{}}')
  local name = "nul-" .. token
  local write = send_hand_written(ctx.conn, "nul-path", ('{"id":"nul-path","method":"write_file","params":'
    .. '{"session":%s,"path":"%s\\u0000/../..","content_base64":"eA=="}}'):format(session_json(ctx), name))
  return expect.all("each refused, or kept exactly", {
    {'id "a\\u0000b"', function()
      local exact = expect.error_code(id) == "unknown_method"
      return exact or refused(id), 'unknown_method for id "a\\u0000b", or invalid_request', outcome(id)
    end},
    {'method "describe\\u0000shutdown"', function()
      local code = expect.error_code(method)
      return (code ~= nil or refused(method)) and not ctx.conn.exited,
        "an error (not describe's result), the provider running", outcome(method)
    end},
    {'write_file "' .. name .. '\\u0000/../.."', function()
      local after = ctx:op("read_file", {path = name})
      return refused(write) and expect.error_code(after) == "not_found",
        "invalid_request; then read_file " .. name .. " not_found",
        outcome(write) .. "; then read_file: " .. expect.reply(after)
    end},
  })
end

local function read_seed_line(ctx, id)
  return json.encode({id = id, method = "read_file", params = {session = ctx.session, path = "seed.txt"}})
end

local function two_on_a_line(ctx)
  local conn = ctx.conn
  local second = conn:track("two-2", "read_file")
  local first = send_hand_written(conn, "two-1", read_seed_line(ctx, "two-1") .. read_seed_line(ctx, "two-2"))
  conn:wait(second, 5)
  local trailing = send_hand_written(conn, "trail", read_seed_line(ctx, "trail") .. " trailing garbage")
  return expect.all("invalid_request, none served", {
    {"first of two on a line", function() return refused(first), "invalid_request", outcome(first) end},
    {"second of two on a line", function()
      return expect.error_code(second) == "invalid_request" or (refused(first) and first.null_reply ~= nil),
        "invalid_request", expect.reply(second)
    end},
    {"text after a request", function() return refused(trailing), "invalid_request", outcome(trailing) end},
  })
end

local function no_params(ctx)
  local req = send_hand_written(ctx.conn, "no-params", '{"id":"no-params","method":"read_file"}')
  -- `params` itself, not only a field inside it (`params.session`)
  local message = message_of(req) .. " "
  return refused(req) and message:find("params[^%.]") ~= nil,
    "invalid_request naming `params`", outcome(req)
end

local function not_utf8(ctx)
  local before = #ctx.conn.violations
  local req = send_hand_written(ctx.conn, "bad-utf8", '{"id":"bad-utf8","method":"read_file\xff\xfe","params":{}}')
  local bad_line = ctx.conn.violations[before + 1]
  return refused(req) and not bad_line, "invalid_request (by the id or with id null), as valid UTF-8 JSON",
    bad_line or outcome(req)
end

-- Paths of 3-byte characters, each shifted by a byte: whatever byte count a
-- provider cuts its message at, one of them puts the cut inside a character.
local function multibyte_paths()
  local paths = {}
  for _, prefix in ipairs({"", "a", "ab"}) do
    paths[#paths + 1] = prefix .. string.rep(string.rep("€", 80) .. "/", 6) .. "missing"
  end
  return paths
end

local function long_echoes(ctx)
  local conn = ctx.conn
  local long_id = string.rep("ü", 1000)
  local cases = {
    {"a 400-character method", function()
      local req = conn:call(string.rep("ü", 400), {})
      return expect.error_code(req) ~= nil, "an error", expect.reply(req)
    end},
    {"a 1000-character id", function()
      local req = send_hand_written(conn, long_id, json.encode({id = long_id, method = "no_such_method", params = {}}))
      return req.error ~= nil or req.null_reply ~= nil, "an error by that id, or with id null", outcome(req)
    end},
    {"a line of multi-byte characters that is not JSON", function()
      local reply, instead = conn:null_reply_to(string.rep("€", 100) .. " is not JSON")
      return reply ~= nil, "an error with id null", reply and expect.show(reply) or instead or "no reply"
    end},
  }
  for i, path in ipairs(multibyte_paths()) do
    cases[#cases + 1] = {"missing path " .. i .. " of " .. #path .. " bytes", function()
      local req = ctx:op("read_file", {path = path})
      return expect.error_code(req) ~= nil, "an error", expect.reply(req)
    end}
  end
  local new, ok, expected, got = violations_during(conn, function()
    return expect.all("an error reply for each", cases)
  end)
  if #new > 0 then ok, got = false, table.concat(new, "; ") end
  return ok, expected .. ", every line valid UTF-8 JSON", got
end

local function long_component(ctx)
  local long = string.rep("n", 300)
  local req = ctx:op("write_file", {path = long, content_base64 = "eA=="})
  local cut = ctx:op("read_file", {path = string.rep("n", 255)})
  local message = type(req.error) == "table" and tostring(req.error.message) or ""
  return expect.error_code(req) ~= nil and message:lower():find("long", 1, true) ~= nil
      and expect.error_code(cut) == "not_found",
    "an error saying the name is too long; no file under the first 255 bytes of it (read_file not_found)",
    expect.reply(req) .. "; then read_file: " .. expect.reply(cut)
end

return {
  {name = "strict lines", raw_errors = true, checks = {
    {"a key twice in one object is invalid_request naming the key", duplicate_keys},
    {"an integer id from 2^53 on comes back exactly or is refused with id null", big_id, session = false},
    {"\\u0000 in an id, a method or a path is refused or kept exactly", nul_strings},
    {"two requests on one line, or text after a request, are invalid_request", two_on_a_line},
    {"a request without params gets invalid_request naming `params`", no_params, session = false},
    {"a line that is not UTF-8 gets an error reply that is JSON", not_utf8, session = false},
    {"errors echoing long or multi-byte ids, methods and paths stay valid UTF-8", long_echoes},
    {"a path component over 255 bytes is an error saying so; nothing is created", long_component},
  }},
}
