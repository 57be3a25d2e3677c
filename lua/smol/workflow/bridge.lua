-- The bridge of a step instance: the context's only way to reach the
-- runner (see context.lua). It opens the instance's session on first use
-- (the workflow's shared one, or its own), passes the output on to the
-- observers with the run's secrets masked (keeping the latest line and
-- the stderr tail the views show), and saves artifacts.
local files = require "smol.workflow.files"
local observe = require "smol.workflow.observe"
local placement = require "smol.workflow.placement"

local M = {}

-- The live view shows one line; a longer one is cut to its last bytes.
local LAST_LINE_MAX = 1024
local NL, CR = 10, 13

-- The last non-empty line of an output chunk (or `previous` when it has
-- none), found by scanning back from the end: output arrives in many
-- chunks, so the cost must not grow with the chunk's size (a pattern
-- anchored only at "$" is retried from every byte).
function M.last_line_of(chunk, previous)
  local stop = #chunk
  while stop > 0 do
    local b = chunk:byte(stop)
    if b ~= NL and b ~= CR then break end
    stop = stop - 1
  end
  if stop == 0 then return previous end
  local start, limit = stop, math.max(1, stop - LAST_LINE_MAX + 1)
  while start > limit do
    local b = chunk:byte(start - 1)
    if b == NL or b == CR then break end
    start = start - 1
  end
  -- A cut line must not start inside a UTF-8 sequence (continuation bytes).
  while start < stop and chunk:byte(start) & 0xC0 == 0x80 do start = start + 1 end
  return chunk:sub(start, stop)
end

-- How much of a command's stderr an instance keeps for the views
-- (inst.stderr_tail, and inst.stderr_bytes of it in all): the last lines
-- of a failed step's stderr show under it in the live view and the
-- summary; the logs have all of it.
local STDERR_TAIL_BYTES = 8 * 1024

function M.keep_tail(previous, chunk)
  local s = previous and previous .. chunk or chunk
  if #s > STDERR_TAIL_BYTES then s = s:sub(-STDERR_TAIL_BYTES) end
  return s
end

-- Whether `path` is missing from the session (a stat says not_found): the
-- copy's own not_found names a path of its archive, not the one asked for.
local function missing_in(session, path)
  local ok, err = pcall(session.stat, session, path)
  return not ok and require("smol.errors").is(err, "not_found")
end

-- The message a failed copy of `path` gets: the copy's own, unless the
-- path is not there at all.
local function artifact_message(session, path, err, structured)
  if structured and err.code == "not_found" and missing_in(session, path) then
    return ("`%s` does not exist in the session"):format(path)
  end
  return (structured and not err.op) and err.message or tostring(err)
end

-- Listed in inst.artifacts only once completely written (copy_out is all
-- or nothing and raises on failure).
local function save_artifact(S, inst, session, path, name)
  local rel = "artifacts/" .. files.safe_name(inst.id) .. "/"
    .. files.check_relative(name or files.basename(path))
  local dest = S.run.report_dir .. "/" .. rel
  local ok, err = pcall(files.copy_out, session, path, dest)
  if not ok then
    -- A cancel or a timeout must stay what it is (the runner classifies it).
    if type(err) == "table" and (err.code == "cancelled" or err.code == "timeout") then error(err, 0) end
    local errors = require "smol.errors"
    local structured = errors.is(err)
    errors.raise{code = structured and err.code or "io_error", op = "save_artifact", path = path,
      message = artifact_message(session, path, err, structured)}
  end
  for _, known in ipairs(inst.artifacts) do if known == rel then return dest end end
  inst.artifacts[#inst.artifacts + 1] = rel
  return dest
end

-- The context's only way to reach the runner (see context.lua).
-- The session an instance uses: the workflow's shared one, or its own
-- (the step names a sandbox, or says `isolate = true`: then it is forked
-- from the shared session where the provider can fork one).
function M.session_key(S, inst)
  return M.own_key(S, inst) or placement.shared_key(S, inst)
end

-- The key of the instance's own session, or nil when it uses the shared one.
function M.own_key(S, inst)
  local def = S.defs[inst.id]
  if def.sandbox or def.isolate then return "step:" .. inst.id end
end

-- The sandbox spec of an instance's session: the step's own or the
-- workflow's, with the profile --profile names instead of theirs.
function M.session_spec(S, inst)
  local spec = S.defs[inst.id].sandbox or S.sandbox
  if not S.profile then return spec end
  local copy = {}
  for k, v in pairs(spec) do copy[k] = v end
  copy.profile = S.profile
  return copy
end

-- A bridge's methods (a metatable, not closures: one is made per attempt).
local Bridge = {}
Bridge.__index = Bridge

local masked_output

-- (what the session is, found when it is first asked for: most steps never
-- open one; a run without secrets has an empty masker, which hides nothing)
function M.new(S, inst)
  local masker = S.masker and not S.masker:empty() and S.masker or nil
  local b = setmetatable({ S = S, inst = inst, masker = masker }, Bridge)
  if masker then b.output = masked_output end
  return b
end

local function session_args(b)
  local S, inst = b.S, b.inst
  local def = S.defs[inst.id]
  b.key, b.spec = M.session_key(S, inst), M.session_spec(S, inst)
  b.from = def.isolate and not def.sandbox and placement.shared_key(S, inst) or nil
  b.member = placement.member(S, inst)
  b.progress = function(ev) observe.notify(S, "step_progress", inst, ev) end
end

function Bridge:session()
  if not self.key then session_args(self) end
  local sessions = self.S.sessions
  local session = sessions:get(self.key, self.spec, self.from, self.progress, self.member)
  self.inst.sandbox = self.inst.sandbox or sessions:info(self.key)
  return session
end

function Bridge:command_started() self.inst.stderr_tail, self.inst.stderr_bytes = nil, nil end

-- Output reaches the logs and the views (bridge:output(stream, chunk),
-- this when the run has no secrets).
function Bridge:output(stream, chunk)
  if chunk == "" then return end
  local inst = self.inst
  inst.last_line = M.last_line_of(chunk, inst.last_line)
  if stream == "stderr" then
    inst.stderr_tail, inst.stderr_bytes = M.keep_tail(inst.stderr_tail, chunk), (inst.stderr_bytes or 0) + #chunk
  end
  observe.notify(self.S, "step_output", inst, stream, chunk)
end

-- With the secrets masked: a secret split between two chunks is held back
-- until the next one.
function masked_output(b, stream, chunk)
  b.masked = b.masked or {}
  b.masked[stream] = b.masked[stream] or b.masker:stream()
  Bridge.output(b, stream, b.masked[stream]:feed(chunk))
end

function Bridge:flush_output()
  if not self.masked then return end
  for stream, m in pairs(self.masked) do Bridge.output(self, stream, m:flush()) end
end

function Bridge:log(message)
  if self.masker then message = self.masker:text(message) end
  self.inst.last_line = message
  observe.notify(self.S, "step_log", self.inst, message)
end

function Bridge:artifact(path, name) return save_artifact(self.S, self.inst, self:session(), path, name) end

function Bridge:exit_code(code) self.inst.exit_code = code end

return M
