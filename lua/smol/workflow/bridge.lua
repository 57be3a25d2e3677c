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
  local def = S.defs[inst.id]
  if def.sandbox or def.isolate then return "step:" .. inst.id end
  return placement.shared_key(S, inst)
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

function M.new(S, inst)
  local def = S.defs[inst.id]
  local key = M.session_key(S, inst)
  local spec = M.session_spec(S, inst)
  local from = def.isolate and not def.sandbox and placement.shared_key(S, inst) or nil
  local member = placement.member(S, inst)
  local b, masked = {}, {}
  local masker = S.masker
  -- Output reaches the logs and the views with the secrets masked; a
  -- secret split between two chunks is held back until the next one.
  local function emit(stream, chunk)
    if chunk == "" then return end
    inst.last_line = M.last_line_of(chunk, inst.last_line)
    if stream == "stderr" then
      inst.stderr_tail, inst.stderr_bytes = M.keep_tail(inst.stderr_tail, chunk), (inst.stderr_bytes or 0) + #chunk
    end
    observe.notify(S, "step_output", inst, stream, chunk)
  end
  local function progress(ev) observe.notify(S, "step_progress", inst, ev) end
  function b.session()
    local session = S.sessions:get(key, spec, from, progress, member)
    inst.sandbox = inst.sandbox or S.sessions:info(key)
    return session
  end
  function b.command_started() inst.stderr_tail, inst.stderr_bytes = nil, nil end
  function b.output(_, stream, chunk)
    if not masker or masker:empty() then return emit(stream, chunk) end
    masked[stream] = masked[stream] or masker:stream()
    emit(stream, masked[stream]:feed(chunk))
  end
  function b.flush_output()
    for stream, m in pairs(masked) do emit(stream, m:flush()) end
  end
  function b.log(_, message)
    if masker then message = masker:text(message) end
    inst.last_line = message
    observe.notify(S, "step_log", inst, message)
  end
  function b.artifact(_, path, name) return save_artifact(S, inst, b.session(), path, name) end
  function b.exit_code(_, code) inst.exit_code = code end
  return b
end

return M
