--[[
smol.errors: the one structured error value raised by the sandbox client.

A provider error, a failed file operation (in a sandbox or on this
machine: smol.fs) or a protocol failure raises a table {code, message, op,
path} whose __tostring reads like the original engine's anyhow context chain (naming path by the optional field `label`
when one is set: a short name for a long path):

  failed to read sandbox file `dir/a.bin`: not_found: no such file

`code` is the protocol's error code (not_found, permission_denied, ...) or
one of the client's own: "protocol" (the provider broke the wire contract),
"provider_exited" (the provider process ended with requests in flight),
"timeout" (a client-side deadline passed), "unsupported" (the session did
not announce the capability a method needs).
]]

local errors = {}

local Error = {}
Error.__index = Error
Error.__name = "smol.error"

-- The context each operation adds in front of "code: message", worded as
-- the original engine words it (sandbox.rs); %s is the path.
local CONTEXT = {
  create_dir_all = "failed to create sandbox directory `%s`",
  write_file = "failed to write sandbox file `%s`",
  read_file = "failed to read sandbox file `%s`",
  remove = "failed to remove sandbox path `%s`",
  create_temp_dir = "failed to create sandbox temp directory",
  stat = "failed to stat sandbox path `%s`",
  list_dir = "failed to list sandbox directory `%s`",
  exec = "failed to run sandbox command `%s`",
  spawn = "failed to spawn sandbox command `%s`",
  wait = "failed to wait for sandbox process `%s`",
  kill = "failed to signal sandbox process `%s`",
  write_stdin = "failed to write to sandbox process `%s`",
  write_archive = "failed to extract an archive into sandbox directory `%s`",
  read_archive = "failed to read an archive of sandbox paths `%s`",
  open = "failed to open sandbox session with provider `%s`",
  close = "failed to close sandbox session",
  shutdown = "failed to shut down provider `%s`",
  start = "failed to start provider `%s`",
  -- this machine's own files (smol.fs, artifacts)
  ["fs.read"] = "cannot read `%s`",
  ["fs.write"] = "cannot write `%s`",
  ["fs.mkdir"] = "cannot create directory `%s`",
  ["fs.remove"] = "cannot remove `%s`",
  ["fs.temp_dir"] = "cannot create temp directory `%s`",
  chmod = "cannot set the mode of `%s`",
  save_artifact = "save_artifact(\"%s\") failed",
}

-- The "failed to ..." prefix for an error, or nil when its op has none.
function errors.context(op, path)
  local fmt = op and CONTEXT[op]
  if not fmt then
    return op and ("sandbox " .. op .. " failed") or nil
  end
  return (fmt:gsub("%%s", function() return tostring(path or "?") end))
end

function Error:__tostring()
  local head = errors.context(self.op, self.label or self.path)
  local body = tostring(self.code) .. ": " .. tostring(self.message)
  return head and (head .. ": " .. body) or body
end

-- Builds an error value. fields: code (required), message, op, path, plus
-- any extra fields (program, exit_code, ...), copied as given.
function errors.new(fields)
  assert(type(fields) == "table" and fields.code, "errors.new: code required")
  local e = {}
  for k, v in pairs(fields) do e[k] = v end
  e.message = e.message or e.code
  return setmetatable(e, Error)
end

-- Raises a new error value (level 0: the value carries no position).
function errors.raise(fields)
  error(errors.new(fields), 0)
end

-- True when v is an error value of ours (with the given code, if any).
function errors.is(v, code)
  if getmetatable(v) ~= Error then return false end
  return code == nil or v.code == code
end

-- Returns a copy of e with op and path set where e has none: the request
-- layer knows the code and message, the sandbox layer knows the op.
-- label, when given, is how the context names path (a short name for a
-- long one, e.g. `smolwf-provider` for its full path); path stays as is.
function errors.with_context(e, op, path, label)
  if not errors.is(e) then return e end
  if e.op then return e end
  local copy = errors.new(e)
  copy.op, copy.path = op, path
  if label ~= path then copy.label = label end
  return copy
end

errors.Error = Error
return errors
