-- Conformance checks: sessions (open, close, workspace_sync) and request ids.
local cjson = require "cjson"
local expect = require "smol.provider.conformance.expect"
local event_rules = require "smol.provider.conformance.event_rules"
local hostside = require "smol.provider.conformance.hostside"

local null = cjson.null

-- Reads `path` in session (default: the group's); the bytes, or nil and the reply text.
local function read(ctx, path, session)
  local req = ctx:op("read_file", {session = session, path = path})
  if not expect.is_result(req) then return nil, expect.reply(req) end
  local data, err = event_rules.field(req.result, "content")
  if not data then return nil, err end
  return data
end

local function open_answers_a_session(ctx)
  local s = ctx.session
  local cwd_ok = s.cwd == nil or s.cwd == null or type(s.cwd) == "string"
  local caps = s.capabilities
  local ok = type(s.id) == "string" and cwd_ok and type(caps) == "table" and caps.exec == true
  return ok, "{id: string, cwd: string or null, capabilities: {exec: true, ...}}", expect.show(s)
end

local function open_copies_workspace(ctx)
  local cases = {}
  for name, content in pairs(ctx.env.ws_files) do
    cases[#cases + 1] = {name, function()
      local got, err = read(ctx, name)
      return got == content, expect.show(content), got and expect.show(got) or err
    end}
  end
  return expect.all("every host workspace file readable with its bytes", cases)
end

local function open_missing_cwd(ctx)
  local req = ctx:open_session({cwd = "no-such-dir-" .. ctx.env.token})
  return expect.error(req, "not_found")
end

local function open_with_cwd(ctx)
  local req, s = ctx:open_session({cwd = "sub"})
  if not s then return false, "a session", expect.reply(req) end
  local got, err = read(ctx, "inner.txt", s)
  return expect.equal(ctx.env.ws_files["sub/inner.txt"], got or err, "inner.txt")
end

local function host_workspace_unchanged(ctx)
  local w = ctx:op("write_file", {path = "seed.txt", content_base64 = "Y2hhbmdlZA=="})
  local r = ctx:op("remove", {path = "sub/inner.txt"})
  if not expect.is_result(w) or not expect.is_result(r) then
    return false, "write_file and remove succeed", expect.reply(w) .. " / " .. expect.reply(r)
  end
  local ws = ctx.env.ws_host
  local seed, inner = hostside.read(ws .. "/seed.txt"), hostside.read(ws .. "/sub/inner.txt")
  local ok = seed == ctx.env.ws_files["seed.txt"] and inner == ctx.env.ws_files["sub/inner.txt"]
  return ok, "host seed.txt and sub/inner.txt unchanged",
    "seed.txt " .. expect.show(seed) .. ", sub/inner.txt " .. expect.show(inner)
end

local function sessions_are_separate(ctx)
  local req, other = ctx:open_session()
  if not other then return false, "a second session", expect.reply(req) end
  local name = "only-in-one-" .. ctx.env.token
  ctx:op("write_file", {path = name, content_base64 = "eA=="})
  return expect.error(ctx:op("read_file", {session = other, path = name}), "not_found")
end

-- Closes a fresh session (params: the session itself, or {session = it}),
-- then expects the session to be unknown.
local function close_then_unknown(ctx, wrapped)
  local req, s = ctx:open_session()
  if not s then return false, "a session to close", expect.reply(req) end
  local closed = ctx:close_session(s, nil, wrapped)
  if not expect.is_result(closed) then return expect.result(closed, "result {}") end
  return expect.error(ctx:op("read_file", {session = s, path = "seed.txt"}), "unknown_session")
end

local function unknown_session(ctx)
  local fake = {id = "no-such-session-" .. ctx.env.token, cwd = null, capabilities = {exec = true}}
  return expect.error(ctx:op("read_file", {session = fake, path = "seed.txt"}), "unknown_session")
end

-- 1 and "1" are different ids: both in flight at once, each gets its own reply.
local function ids_keep_their_type(ctx)
  ctx:op("write_file", {path = "id-int.txt", content_base64 = "aW50"})      -- "int"
  ctx:op("write_file", {path = "id-str.txt", content_base64 = "c3Ry"})      -- "str"
  local n = ctx:send_op("read_file", {path = "id-int.txt"}, {id = 4242})
  local s = ctx:send_op("read_file", {path = "id-str.txt"}, {id = "4242"})
  ctx.conn:wait(n)
  ctx.conn:wait(s)
  local got_n = expect.is_result(n) and event_rules.field(n.result, "content")
  local got_s = expect.is_result(s) and event_rules.field(s.result, "content")
  return got_n == "int" and got_s == "str",
    'id 4242 reads "int", id "4242" reads "str"',
    "id 4242: " .. expect.reply(n) .. ", id \"4242\": " .. expect.reply(s)
end

return {
  {name = "session", checks = {
    {"open answers a session with an id, a cwd and capabilities.exec", open_answers_a_session},
    {"open copies workspace_sync.host_path into the workspace", open_copies_workspace},
    {"open with a cwd that does not exist is not_found", open_missing_cwd},
    {"open with cwd `sub` resolves relative paths there", open_with_cwd},
    {"writes in the sandbox never change the host workspace", host_workspace_unchanged},
    {"two sessions do not share files", sessions_are_separate},
    {"close answers {} and the session is then unknown_session", function(ctx) return close_then_unknown(ctx, false) end},
    {"close also accepts {session: SESSION}", function(ctx) return close_then_unknown(ctx, true) end},
    {"a request for a session that does not exist is unknown_session", unknown_session},
    {"ids 4242 and \"4242\" are different requests, both answered", ids_keep_their_type},
  }},
}
