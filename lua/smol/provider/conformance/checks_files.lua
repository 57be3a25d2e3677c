-- Conformance checks: file operations, and paths that try to leave the sandbox.
local core = require "smol.core"
local expect = require "smol.provider.conformance.expect"
local event_rules = require "smol.provider.conformance.event_rules"
local hostside = require "smol.provider.conformance.hostside"

local b64 = core.b64encode

local function write(ctx, path, data)
  return ctx:op("write_file", {path = path, content_base64 = b64(data)})
end

-- The bytes at path, or nil and what came back instead.
local function read(ctx, path)
  local req = ctx:op("read_file", {path = path})
  if not expect.is_result(req) then return nil, expect.reply(req) end
  return event_rules.field(req.result, "content")
end

-- Writes then reads back: ok, expected, got.
local function round_trip(ctx, path, data)
  local w = write(ctx, path, data)
  if not expect.is_result(w) then return false, "write_file succeeds", expect.reply(w) end
  local got, err = read(ctx, path)
  return got == data, expect.show(data), got and expect.show(got) or err
end

local function all_bytes_round_trip(ctx)
  return round_trip(ctx, "all-bytes.bin", hostside.all_bytes())
end

local function write_replaces(ctx)
  write(ctx, "replaced.txt", "a longer first content\n")
  return round_trip(ctx, "replaced.txt", "short\n")
end

local function read_missing(ctx)
  return expect.error(ctx:op("read_file", {path = "no-such-file-" .. ctx.env.token}), "not_found")
end

local function read_directory(ctx)
  return expect.error(ctx:op("read_file", {path = "sub"}), "is_a_directory")
end

local function create_dir_all_nested(ctx)
  local req = ctx:op("create_dir_all", {path = "d1/d2/d3"})
  if not expect.is_result(req) then return expect.result(req, "result {}") end
  return round_trip(ctx, "d1/d2/d3/f.txt", "deep\n")
end

local function create_dir_all_existing(ctx)
  ctx:op("create_dir_all", {path = "exists/x"})
  return expect.result(ctx:op("create_dir_all", {path = "exists/x"}), "result {}")
end

local function create_dir_all_through_file(ctx)
  return expect.error(ctx:op("create_dir_all", {path = "seed.txt/below"}), "not_a_directory")
end

local function remove_file(ctx)
  write(ctx, "to-remove.txt", "x")
  local req = ctx:op("remove", {path = "to-remove.txt"})
  if not expect.is_result(req) then return expect.result(req, "result {}") end
  return expect.error(ctx:op("read_file", {path = "to-remove.txt"}), "not_found")
end

local function remove_tree(ctx)
  ctx:op("create_dir_all", {path = "tree/x/y"})
  write(ctx, "tree/x/f.txt", "x")
  local req = ctx:op("remove", {path = "tree"})
  if not expect.is_result(req) then return expect.result(req, "result {}") end
  return expect.error(ctx:op("read_file", {path = "tree/x/f.txt"}), "not_found")
end

local function remove_missing(ctx)
  return expect.error(ctx:op("remove", {path = "no-such-file-" .. ctx.env.token}), "not_found")
end

local function temp_dir(ctx)
  local req = ctx:op("create_temp_dir", {prefix = "conf-"})
  local path = expect.is_result(req) and req.result.path
  if type(path) ~= "string" or not path:match("^/") or not path:match("/conf%-[^/]*$") then
    return false, "an absolute path whose last part starts with conf-", expect.reply(req)
  end
  local ok, exp, got = round_trip(ctx, path .. "/t.txt", "in temp\n")
  if not ok then return ok, exp, got end
  local cat = ctx:exec({"cat", path .. "/t.txt"})
  return expect.equal("in temp\n", event_rules.field(cat.result, "stdout") or expect.reply(cat),
    "a command's cat of it")
end

local function absolute_inside(ctx)
  local cwd = ctx.session.cwd
  if type(cwd) ~= "string" or not cwd:match("^/") then
    return "skip", "the session has no absolute cwd"
  end
  local w = write(ctx, cwd .. "/absolute.txt", "abs\n")
  if not expect.is_result(w) then return false, "write_file of cwd/absolute.txt", expect.reply(w) end
  local got, err = read(ctx, "absolute.txt")
  return expect.equal("abs\n", got or err, "absolute.txt")
end

local function dotdot_inside(ctx)
  ctx:op("create_dir_all", {path = "dd"})
  local w = write(ctx, "dd/../dotdot.txt", "dd\n")
  if not expect.is_result(w) then return false, "write_file dd/../dotdot.txt", expect.reply(w) end
  local got, err = read(ctx, "dotdot.txt")
  return expect.equal("dd\n", got or err, "dotdot.txt")
end

local function symlink_inside(ctx)
  local r = ctx:exec({"sh", "-c", "mkdir -p real && printf in > real/f && ln -s real inlink"})
  if not (expect.is_result(r) and r.result.exit_code == 0) then
    return false, "the command making the link succeeds", expect.reply(r)
  end
  local got, err = read(ctx, "inlink/f")
  return expect.equal("in", got or err, "inlink/f")
end

-- ======================================================================
-- Escapes
-- ======================================================================

-- A sub-case: method on path must be refused with one of `codes`.
local function refused(ctx, method, params, codes)
  return {method .. " " .. params.path, function()
    local req = ctx:op(method, params)
    local code = expect.error_code(req)
    for _, c in ipairs(codes or {"permission_denied"}) do
      if code == c then return true end
    end
    return false, "error " .. table.concat(codes or {"permission_denied"}, " or "), expect.reply(req)
  end}
end

-- A sub-case: nothing may exist at host_path afterwards (removed if it does).
local function nothing_at(host_path)
  return {"host " .. host_path, function()
    if not hostside.exists(host_path) then return true end
    hostside.remove_tree(host_path)
    return false, "nothing created on the host", host_path .. " was created (removed now)"
  end}
end

local function dotdot_escape(ctx)
  local t = ctx.env.token
  return expect.all("permission_denied for each", {
    refused(ctx, "read_file", {path = "../seed.txt"}),
    refused(ctx, "read_file", {path = "sub/../../seed.txt"}),
    refused(ctx, "write_file", {path = "../escape-" .. t, content_base64 = "eA=="}),
    refused(ctx, "create_dir_all", {path = "../escape-dir-" .. t}),
    refused(ctx, "remove", {path = "../no-such-" .. t}),
  })
end

local function absolute_escape(ctx)
  local t = ctx.env.token
  return expect.all("permission_denied for each, nothing written on the host", {
    refused(ctx, "read_file", {path = "/etc/passwd"}),
    refused(ctx, "write_file", {path = "/escape-" .. t, content_base64 = "eA=="}),
    refused(ctx, "create_dir_all", {path = "/escape-dir-" .. t}),
    refused(ctx, "remove", {path = "/no-such-" .. t}),
    nothing_at("/escape-" .. t),
    nothing_at("/escape-dir-" .. t),
  })
end

-- The workspace's own links to /etc: refused, or absent if not copied, never followed.
local function synced_link_escape(ctx)
  local either = {"permission_denied", "not_found"}
  return expect.all("permission_denied (or not_found if the link was not copied)", {
    refused(ctx, "read_file", {path = "passwd_link"}, either),
    refused(ctx, "read_file", {path = "etc_link/passwd"}, either),
    refused(ctx, "write_file", {path = "etc_link/escape-" .. ctx.env.token,
      content_base64 = "eA=="}, either),
  })
end

local function command_link_escape(ctx)
  local t = ctx.env.token
  local r = ctx:exec({"sh", "-c", "ln -s / rootlink && ln -s .. uplink && " ..
    "ln -s /etc/passwd pwlink && ln -s /dangling-" .. t .. " danglink"})
  if not (expect.is_result(r) and r.result.exit_code == 0) then
    return false, "the command making the links succeeds", expect.reply(r)
  end
  return expect.all("permission_denied for each, nothing written on the host", {
    refused(ctx, "read_file", {path = "pwlink"}),
    refused(ctx, "read_file", {path = "rootlink/etc/passwd"}),
    refused(ctx, "write_file", {path = "uplink/escape-" .. t, content_base64 = "eA=="}),
    refused(ctx, "write_file", {path = "danglink", content_base64 = "eA=="}),
    refused(ctx, "create_dir_all", {path = "rootlink/escape-dir-" .. t}),
    refused(ctx, "remove", {path = "rootlink/no-such-" .. t}),
    nothing_at("/dangling-" .. t),
    nothing_at("/escape-dir-" .. t),
  })
end

return {
  {name = "files", checks = {
    {"write_file then read_file round-trips all 256 byte values", all_bytes_round_trip},
    {"write_file replaces an existing file's content", write_replaces},
    {"read_file of a missing path is not_found", read_missing},
    {"read_file of a directory is is_a_directory", read_directory},
    {"create_dir_all makes nested directories", create_dir_all_nested},
    {"create_dir_all on an existing directory succeeds", create_dir_all_existing},
    {"create_dir_all through a file is not_a_directory", create_dir_all_through_file},
    {"remove deletes a file", remove_file},
    {"remove deletes a directory with its contents", remove_tree},
    {"remove of a missing path is not_found", remove_missing},
    {"create_temp_dir answers an absolute path with the prefix, usable by files and commands",
      temp_dir},
    {"absolute paths under the session cwd work like relative ones", absolute_inside},
    {"a path through `dir/..` that stays inside works", dotdot_inside},
    {"a relative symlink that stays inside is followed", symlink_inside},
  }},
  {name = "escapes", checks = {
    {"`..` out of the session is permission_denied", dotdot_escape},
    {"absolute paths outside the session are permission_denied", absolute_escape},
    {"workspace symlinks pointing out are never followed", synced_link_escape},
    {"symlinks a command creates pointing out are permission_denied", command_link_escape},
  }},
}
