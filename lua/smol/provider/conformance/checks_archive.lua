-- Conformance checks: the `archive` extension (docs/protocol.md, section 6),
-- run only when the session announces it. The valid archives are the
-- provider's own (read_archive, then written back); the hostile ones come
-- from hostile_tars.lua (made by Python's tarfile).
local core = require "smol.core"
local expect = require "smol.provider.conformance.expect"
local event_rules = require "smol.provider.conformance.event_rules"
local hostside = require "smol.provider.conformance.hostside"
local archive_stream = require "smol.provider.conformance.archive_stream"
local hostile = require "smol.provider.conformance.hostile_tars"
local wire = require "smol.provider.conformance.wire"

local b64 = core.b64encode

-- The tree the checks pack: name -> content ("" names a directory).
local function tree(token)
  local top = "arc-" .. token
  return top, {
    {top, ""}, {top .. "/a.txt", "alpha\n"}, {top .. "/sub", ""},
    {top .. "/sub/bytes.bin", hostside.all_bytes()}, {top .. "/sub/big.bin", string.rep("0123456789", 250000)},
  }
end

-- Makes the tree with core file methods; nil, or what went wrong.
local function make_tree(ctx, files)
  for _, f in ipairs(files) do
    local req = f[2] == "" and ctx:op("create_dir_all", {path = f[1]})
      or ctx:op("write_file", {path = f[1], content_base64 = b64(f[2])})
    if not expect.is_result(req) then return f[1] .. ": " .. expect.reply(req) end
  end
end

-- The files of the tree found under dir with their contents; nil, or the first difference.
local function tree_problem(ctx, dir, files)
  for _, f in ipairs(files) do
    if f[2] ~= "" then
      local req = ctx:op("read_file", {path = dir .. "/" .. f[1]})
      local got = expect.is_result(req) and event_rules.field(req.result, "content")
      if got ~= f[2] then return dir .. "/" .. f[1] .. ": " .. (got and expect.show(got) or expect.reply(req)) end
    end
  end
end

local function round_trip(ctx)
  local top, files = tree(ctx.env.token)
  local problem = make_tree(ctx, files)
  if problem then return false, "the tree is made with core file methods", problem end
  local out = archive_stream.read(ctx.conn, ctx.session, {top})
  if not expect.is_result(out) or out.problem then
    return false, "started, chunk events, then {entries, bytes}", out.problem or expect.reply(out)
  end
  ctx:op("create_dir_all", {path = "copy-" .. ctx.env.token})
  local into = archive_stream.write(ctx.conn, ctx.session, out.data, {path = "copy-" .. ctx.env.token, chunk = 100000})
  problem = not expect.is_result(into) and expect.reply(into) or tree_problem(ctx, "copy-" .. ctx.env.token, files)
  local counts = out.result.entries == #files and into.result and into.result.entries == #files
    and out.result.bytes == #out.data
  return not problem and counts, ("read_archive then write_archive of %d entries: the same files"):format(#files),
    problem or ("read %s, write %s"):format(expect.show(out.result), expect.reply(into))
end

local function read_with_window(ctx)
  local _, files = tree(ctx.env.token)
  make_tree(ctx, files)
  local out = archive_stream.read(ctx.conn, ctx.session, {files[5][1]}, {window = 1})
  local ok = expect.is_result(out) and not out.problem and out.chunks >= 2 and #out.data == out.result.bytes
  return ok, "window 1, each chunk acknowledged: several chunks, then the result",
    out.problem or (expect.reply(out) .. " after " .. out.chunks .. " chunks")
end

local function refused(ctx, name, code)
  return {name, function()
    local dir = "hostile-" .. name .. "-" .. ctx.env.token
    ctx:op("create_dir_all", {path = dir})
    local req = archive_stream.write(ctx.conn, ctx.session, core.b64decode(hostile[name]), {path = dir})
    local escaped = hostside.exists(hostile.escape_dir)
    if escaped then hostside.remove_tree(hostile.escape_dir) end
    if escaped then return false, "nothing outside the session", hostile.escape_dir .. " was created" end
    return expect.error(req, code)
  end}
end

local function refuses_hostile(ctx)
  return expect.all("each refused", {
    refused(ctx, "absolute", "permission_denied"), refused(ctx, "dotdot", "permission_denied"),
    refused(ctx, "symlink_out", "permission_denied"), refused(ctx, "symlink_through", "permission_denied"),
    refused(ctx, "hardlink_out", "permission_denied"), refused(ctx, "chardev", "permission_denied"),
  })
end

local function not_a_tar(ctx)
  local req = ctx:op("write_archive", {data_base64 = b64(string.rep("not a tar\n", 200)), eof = true})
  return expect.error(req, "invalid_request")
end

local function abort_read(ctx)
  local _, files = tree(ctx.env.token)
  make_tree(ctx, files)
  local req = ctx:send_op("read_archive", {paths = {files[5][1]}, window = 1})
  local started = wire.wait_until(function() return #req.events >= 1 or req.done end, wire.DEFAULT_TIMEOUT)
  local id = started and req.events[1] and req.events[1].archive_id
  if not id then return false, "a started event with archive_id", expect.reply(req) end
  local abort = ctx:op("abort_archive", {archive_id = id})
  ctx.conn:wait(req)
  local ok = expect.is_result(abort) and req.done and req.error ~= nil
  return ok, "abort_archive answers {} and the read ends with an error",
    "abort " .. expect.reply(abort) .. ", read " .. expect.reply(req)
end

local function unknown_archive(ctx)
  return expect.all("invalid_request for each", {
    {"write_archive", function() return expect.error(ctx:op("write_archive", {archive_id = "nope"}), "invalid_request") end},
    {"read_archive_ack", function()
      return expect.error(ctx:op("read_archive_ack", {archive_id = "nope", chunks = 0}), "invalid_request") end},
    {"abort_archive", function() return expect.error(ctx:op("abort_archive", {archive_id = "nope"}), "invalid_request") end},
  })
end

local function read_missing(ctx)
  return expect.error(ctx:op("read_archive", {paths = {"no-such-" .. ctx.env.token}}), "not_found")
end

return {
  {name = "archive", needs = "archive", checks = {
    {"read_archive then write_archive moves a tree unchanged", round_trip},
    {"read_archive with a window waits for read_archive_ack", read_with_window},
    {"write_archive refuses absolute names, .., links out, writes through links, devices", refuses_hostile},
    {"write_archive of data that is not a tar is invalid_request", not_a_tar},
    {"abort_archive ends a read in flight", abort_read},
    {"an unknown archive_id is invalid_request", unknown_archive},
    {"read_archive of a missing path is not_found", read_missing},
  }},
}
