-- Recording of every line exchanged with every provider (for `--record FILE`).
--
--   local rec = require("smol.recording.record").start("run.jsonl")
--   ... run sessions, workflows ...
--   rec:stop()            -- optional: entries are flushed line by line
--
-- The file is JSON Lines. The first line describes the recording:
--   {"format":"smolwf-recording","version":1,"started_at":T}
-- then one line per exchanged line, in the order the host saw them:
--   {"seq":N,"t":T,"elapsed":E,"dir":"send"|"recv","program":P,"conn":C,"session":S,"line":L}
-- `line` is the exact JSON text (kept as a string, so nothing is lost by a
-- decode/encode round trip); `session` is the session id the line belongs
-- to (absent for `open` requests, `shutdown`, `describe`); `t` is the wall
-- clock (core.time(), to 0.1 ms: lua-cjson writes 14 digits) and `elapsed`
-- the monotonic seconds since the recording started (to the microsecond).
-- A provider's exit adds {"dir":"exit","program":P,"conn":C,"status":N},
-- with "signal":"KILL" (say) when a signal ended it, and "crash":true when
-- it ended on its own (see jsonl.observe): smol.recording.replay replays the
-- requests a crash left unanswered as the same crash.
--
-- Secrets never reach the file: once a run knows them, rec:mask_with(masker)
-- (a smol.workflow.mask masker; record.mask_current for the recording that
-- runs) masks every form of them in each entry's line and program, and an
-- entry it changed gets "masked":true (replay then takes each "***" in it
-- for any text).
local cjson = require "cjson"
local core = require "smol.core"
local jsonl = require "smol.jsonl"

local M = {}
M.FORMAT, M.VERSION = "smolwf-recording", 1

local json = cjson.new()
json.decode_max_depth(128)

local Recorder = {}
Recorder.__index = Recorder

-- The session a request is about: params.session.id, or the session object
-- itself for `close` (sent as the params, like the original does).
local function session_of_request(msg)
  local params = type(msg.params) == "table" and msg.params or {}
  if type(params.session) == "table" and type(params.session.id) == "string" then
    return params.session.id
  end
  if msg.method == "close" and type(params.id) == "string" then return params.id end
end

-- Decodes a line for its bookkeeping only; a line that is not JSON is
-- still recorded, just without a session.
local function decode(line)
  local ok, msg = pcall(json.decode, line)
  if ok and type(msg) == "table" then return msg end
end

function Recorder:session_for(direction, conn, line)
  local msg = decode(line)
  if not msg or msg.id == nil then return nil end
  local requests = self.requests[conn]
  if not requests then requests = {}; self.requests[conn] = requests end
  local key = tostring(msg.id)
  if direction == "send" then
    requests[key] = {session = session_of_request(msg), method = msg.method}
    return requests[key].session
  end
  local req = requests[key] or {}
  if msg.result ~= nil or msg.error ~= nil then requests[key] = nil end
  if req.method == "open" and type(msg.result) == "table" and type(msg.result.id) == "string" then
    return msg.result.id
  end
  return req.session
end

function Recorder:write(entry)
  self.seq = self.seq + 1
  entry.seq, entry.t, entry.elapsed = self.seq, core.time(), core.now() - self.started
  self.file:write(json.encode(entry), "\n")
end

-- A decoded line's value with every string masked; a *_base64 field is
-- decoded, masked and encoded again, so the recording stays valid.
local function mask_value(m, v, key)
  if type(v) == "string" then
    local bytes = type(key) == "string" and key:match("_base64$") and core.b64decode(v)
    if bytes then return core.b64encode(m:text(bytes)) end
    return m:text(v)
  end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[mask_value(m, k)] = mask_value(m, x, k) end
  return out
end

-- text (a line, a program) with the secrets masked, and whether that changed it.
function Recorder:masked(text)
  local m = self.masker
  if m == nil or type(text) ~= "string" then return text, false end
  local out = m:text(text)
  if out == text then return text, false end
  local msg = decode(text)
  if msg then out = json.encode(mask_value(m, msg)) end
  return out, true
end

function Recorder:observe(direction, info, what, signal, crashed)
  if self.stopped then return end
  local program, masked_program = self:masked(info.program)
  if direction == "exit" then
    return self:write({dir = "exit", program = program, conn = info.conn, status = what,
      signal = signal, crash = crashed or nil, masked = masked_program or nil})
  end
  local line, masked_line = self:masked(what)
  self:write({dir = direction, program = program, conn = info.conn,
    session = self:session_for(direction, info.conn, what), line = line,
    masked = (masked_line or masked_program) or nil})
end

--- Masks the secrets of masker (smol.workflow.mask) in every entry from now on.
function Recorder:mask_with(masker)
  self.masker = masker ~= nil and not masker:empty() and masker or nil
end

--- rec:mask_with(masker) for the recording that runs, if any.
function M.mask_current(masker)
  if M.current then M.current:mask_with(masker) end
end

--- Stops recording and closes the file (idempotent).
function Recorder:stop()
  if self.stopped then return end
  self.stopped = true
  self.unobserve()
  if M.current == self then M.current = nil end
  self.file:close()
end

--- Starts recording into `path` (truncated). Only one recording at a time.
function M.start(path)
  if type(path) ~= "string" then
    error("bad argument #1 to 'record.start' (a file path expected, got " .. type(path) .. ")", 2)
  end
  if M.current then error("record.start: already recording to " .. M.current.path, 2) end
  local file, err = io.open(path, "w")
  if not file then error(("cannot record to `%s`: %s"):format(path, err), 2) end
  file:setvbuf("line")   -- every entry reaches the file even if the run dies
  local rec = setmetatable({path = path, file = file, seq = 0, requests = {}, started = core.now()}, Recorder)
  file:write(json.encode({format = M.FORMAT, version = M.VERSION, started_at = core.time()}), "\n")
  M.current = rec
  rec.unobserve = jsonl.observe(function(direction, info, what, signal, crashed)
    rec:observe(direction, info, what, signal, crashed)
  end)
  -- No exit hook: sessions closed by exit hooks must be recorded too, and
  -- line buffering already puts every entry in the file.
  return rec
end

return M
