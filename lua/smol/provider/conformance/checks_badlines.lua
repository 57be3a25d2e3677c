-- Conformance checks: lines that are not valid requests get an error reply
-- (id null when the id cannot be read) and the provider keeps serving.
local expect = require "smol.provider.conformance.expect"
local event_rules = require "smol.provider.conformance.event_rules"
local wire = require "smol.provider.conformance.wire"

local json = wire.json

local function null_reply_to(ctx, line)
  return ctx.conn:null_reply_to(line)
end

local function show_null(reply, instead)
  return reply and expect.show(reply) or instead or "no reply with id null within 5s"
end

local function error_code_of(reply)
  return reply and type(reply.error) == "table" and reply.error.code
end

local function not_json(ctx)
  local reply = null_reply_to(ctx, "this is not JSON {")
  return error_code_of(reply) == "invalid_request",
    '{"id": null, "error": {"code": "invalid_request"}}', show_null(reply)
end

local function wrong_id_type(ctx)
  local cases = {}
  for _, id in ipairs({"true", "[1]", '{"n": 1}'}) do
    cases[#cases + 1] = {"id " .. id, function()
      local reply, instead = null_reply_to(ctx,
        '{"id": ' .. id .. ', "method": "describe", "params": {}}')
      return error_code_of(reply) ~= nil, "an error with id null", show_null(reply, instead)
    end}
  end
  return expect.all("an error reply with id null for each", cases)
end

local function unknown_method(ctx)
  return expect.error(ctx.conn:call("no_such_method_" .. ctx.env.token, {}), "unknown_method")
end

local function missing_method(ctx)
  return expect.error(ctx.conn:call(nil, {}), "invalid_request")
end

local function bad_params(ctx)
  local function case(method, params)
    return {method .. " " .. expect.show(params), function()
      params.session = ctx.session
      return expect.error(ctx.conn:call(method, params), "invalid_request")
    end}
  end
  return expect.all("invalid_request for each", {
    case("read_file", {}),
    case("read_file", {path = 5}),
    case("write_file", {path = "bad.bin", content_base64 = "not base64!"}),
    case("exec", {argv = "echo", cwd = wire.null, env = wire.null, stdin_base64 = wire.null}),
  })
end

local function params_not_object(ctx)
  local req = ctx.conn:send_line("params-array", "read_file",
    '{"id": "params-array", "method": "read_file", "params": [1, 2]}')
  ctx.conn:wait(req)
  return expect.error(req, "invalid_request")
end

local function blank_lines(ctx)
  local before = #ctx.conn.null_replies
  ctx.conn:send_raw("")
  local req = ctx:op("read_file", {path = "seed.txt"})
  local quiet = #ctx.conn.null_replies == before
  return quiet and expect.is_result(req), "no reply to the blank line; the next request served",
    (quiet and "" or "a reply with id null; ") .. expect.reply(req)
end

local function unknown_fields(ctx)
  local req = ctx.conn:send_line("extra-fields", "read_file", json.encode({id = "extra-fields",
    method = "read_file", future = {x = 1},
    params = {session = ctx.session, path = "seed.txt", future_option = true}}))
  ctx.conn:wait(req)
  local got = expect.is_result(req) and event_rules.field(req.result, "content")
  return expect.equal(ctx.env.ws_files["seed.txt"], got or expect.reply(req), "content")
end

local function keeps_serving(ctx)
  local req = ctx:exec({"echo", "still here"})
  local out = expect.is_result(req) and event_rules.field(req.result, "stdout")
  return out == "still here\n" and not ctx.conn.exited,
    'exec of echo answers "still here\\n"; the provider runs',
    expect.reply(req) .. "; provider " .. ctx.conn:exit_status()
end

-- session = false: checks that still run when the provider cannot open a session.
return {
  {name = "bad lines", raw_errors = true, checks = {
    {"a line that is not JSON gets invalid_request with id null", not_json, session = false},
    {"an id that is not a string or integer gets an error with id null", wrong_id_type, session = false},
    {"an unknown method gets unknown_method with the request's id", unknown_method, session = false},
    {"a request without a method gets invalid_request", missing_method, session = false},
    {"missing or mistyped params get invalid_request", bad_params},
    {"params that are not an object get invalid_request", params_not_object, session = false},
    {"blank lines are ignored", blank_lines},
    {"unknown fields are ignored", unknown_fields},
    {"after all that the provider keeps serving", keeps_serving},
  }},
}
