-- Replay of a recording made by smol.recording.record: a provider that answers every
-- request with the events and the result (or error) recorded for the same
-- request, without running anything.
--
--   sandbox.open{program = replay.program("run.jsonl")}   -- one provider
--   replay.install("run.jsonl")      -- every provider of this process (--replay)
--
-- Matching: a request matches a recorded one with the same method and the
-- same params, ignoring the request id and `open`'s `metadata` (generated
-- anew by every run) and any field listed in opts.ignore ("params.cwd"...).
-- Recorded requests are used once each, in recorded order among equals, so
-- concurrent requests may arrive in any order. A request with no match
-- fails (`replay_mismatch` error) with the closest recorded request and the
-- actual one side by side. A request the recorded provider left unanswered when it
-- exited (a crash) is replayed as that crash: its recorded events, then the
-- replay provider exits the same way (status, or the same signal).
local cjson = require "cjson"
local lfs = require "lfs"
local core = require "smol.core"
local canonical = require "smol.recording.canonical"

local M = {}

local json = cjson.new()
json.decode_max_depth(128)

local function read_entries(path)
  local file, err = io.open(path, "r")
  if not file then error(("cannot read recording `%s`: %s"):format(path, err), 0) end
  local entries, n = {}, 0
  for line in file:lines() do
    n = n + 1
    local ok, entry = pcall(json.decode, line)
    if not ok or type(entry) ~= "table" then
      file:close()
      error(("recording `%s` line %d is not a JSON object"):format(path, n), 0)
    end
    entries[#entries + 1] = entry
  end
  file:close()
  if not entries[1] or entries[1].format ~= "smolwf-recording" then
    error(("`%s` is not a smolwf recording (no header line)"):format(path), 0)
  end
  return entries
end

local function new_exchange(entry, msg)
  return {conn = entry.conn, program = entry.program, seq = entry.seq, id = msg.id,
    method = msg.method, params = msg.params, replies = {}, complete = false, masked = entry.masked}
end

-- The exchanges still waiting for their terminal line on a connection, by request id.
local function waiting_on(open, conn)
  local key = tostring(conn)
  open[key] = open[key] or {}
  return open[key]
end

--[[
Pairs each sent request with the lines received for its id on its
connection, up to the terminal one. The exchanges a provider's crash left
without one get `crash` = {status =, signal =} from its exit entry (an
exit we asked for, or caused by giving up, ends them unmatched).
]]
local function build_exchanges(entries)
  local exchanges, open = {}, {}
  for i = 2, #entries do
    local e = entries[i]
    local ok, msg = pcall(json.decode, e.line or "")
    if e.dir == "exit" then
      for _, ex in pairs(e.crash and waiting_on(open, e.conn) or {}) do
        ex.crash = {status = math.tointeger(e.status), signal = e.signal}
      end
      open[tostring(e.conn)] = nil
    elseif ok and type(msg) == "table" and msg.id ~= nil then
      local waiting, id = waiting_on(open, e.conn), tostring(msg.id)
      if e.dir == "send" and type(msg.method) == "string" then
        waiting[id] = new_exchange(e, msg)
        exchanges[#exchanges + 1] = waiting[id]
      elseif e.dir == "recv" and waiting[id] then
        local ex = waiting[id]
        ex.replies[#ex.replies + 1] = msg
        if msg.result ~= nil or msg.error ~= nil then ex.complete, waiting[id] = true, nil end
      end
    end
  end
  return exchanges
end

-- params with each *_base64 string decoded (where it is base64), for
-- matching a request whose secrets were masked inside its payloads.
local function decoded(v, key)
  if type(v) == "string" then
    return type(key) == "string" and key:match("_base64$") and core.b64decode(v) or v
  end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = decoded(x, k) end
  return out
end

-- A request recorded with its secrets masked matches any text where a
-- "***" stands (see smol.recording.record), payloads decoded.
local function masked_pattern(key)
  local escaped = key:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
  return "^" .. escaped:gsub("%%%*%%%*%%%*", ".-") .. "$"
end

--- Loads a recording: {path, exchanges = {{method, params, replies, ...}}}.
function M.load(path, opts)
  opts = opts or {}
  local rec = {path = path, ignore = {}, program = opts.program,
    exchanges = build_exchanges(read_entries(path))}
  for _, field in ipairs(opts.ignore or {}) do rec.ignore[field] = true end
  for _, ex in ipairs(rec.exchanges) do
    ex.key = canonical.request_key(ex.method, ex.params, rec.ignore)
    if ex.masked then ex.pattern = masked_pattern(canonical.request_key(ex.method, decoded(ex.params), rec.ignore)) end
  end
  return rec
end

--- The first unused recorded exchange matching (method, params), or nil.
-- Exchanges recorded with rec.program (when set) come first.
function M.find(rec, method, params)
  local key = canonical.request_key(method, params, rec.ignore)
  local plain_key   -- the key with payloads decoded, made when a masked exchange needs it
  local function matches(ex)
    if ex.key == key then return true end
    if not ex.pattern then return false end
    plain_key = plain_key or canonical.request_key(method, decoded(params), rec.ignore)
    return plain_key:match(ex.pattern) ~= nil
  end
  local fallback
  for _, ex in ipairs(rec.exchanges) do
    if not ex.used and (ex.complete or ex.crash) and matches(ex) then
      if rec.program == nil or ex.program == rec.program then return ex end
      fallback = fallback or ex
    end
  end
  return fallback
end

--- The message for a request that matches nothing.
function M.mismatch_message(rec, method, params)
  local closest = canonical.closest(rec.exchanges, method, params, rec.ignore)
  local header = ("replay: no request in the recording `%s` matches this `%s` request"):format(rec.path, method)
  if not closest then
    return header .. " (every recorded request was already used)\n"
      .. canonical.side_by_side(nil, {method = method, params = params}, rec.ignore)
  end
  return ("%s\n  closest unused recorded request: #%s (connection %s, `%s`)\n%s"):format(header,
    canonical.scalar(closest.seq), canonical.scalar(closest.conn), closest.method,
    canonical.side_by_side({method = closest.method, params = closest.params},
      {method = method, params = params}, rec.ignore))
end

-- Ends the replay provider as the recorded one ended, once the replies
-- written so far have left: killed by the same signal, or with its status.
local function crash(how)
  require("smol.provider.server").flush()
  if how.signal then pcall(require("smol.core").raise, how.signal) end   -- an unknown name: the status
  os.exit(how.status or 1, false)
end

-- Sends the recorded replies of `ex` for the current request (a crash: see crash).
local function answer(ex, req)
  local server = require "smol.provider.server"
  for _, msg in ipairs(ex.replies) do
    if msg.event ~= nil then
      req:event(msg.event)
    elseif msg.error ~= nil then
      local e = type(msg.error) == "table" and msg.error or {}
      server.fail(tostring(e.code or "internal"), tostring(e.message or ""))
    else
      return msg.result
    end
  end
  if ex.crash then crash(ex.crash) end
end

--- The methods of the replay provider (for smol.provider.server).
function M.methods(path, opts)
  local rec = M.load(path, opts)
  local server = require "smol.provider.server"
  local function handle(_, req)
    local params = req.raw
    local ex = M.find(rec, req.method, params)
    if ex then
      ex.used = true
      return answer(ex, req)
    end
    if req.method == "close" and req.id == false then return {} end   -- closing at shutdown
    server.fail("replay_mismatch", M.mismatch_message(rec, req.method, params))
  end
  return {["*"] = handle, close = handle}
end

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  return lfs.currentdir() .. "/" .. path
end

--- A provider program (for sandbox.open{program = ...}) that replays
-- `path`: an argv list, so nothing is written to disk and no PATH lookup
-- or shell is needed.
function M.program(path, opts)
  local file = package.searchpath("smol.recording.replay_provider", package.path)
  if not file then error("replay: cannot find the module smol.recording.replay_provider", 2) end
  opts = opts or {}
  local args = {absolute(path)}
  for _, field in ipairs(opts.ignore or {}) do args[#args + 1] = "--ignore=" .. field end
  if opts.program then args[#args + 1] = "--program=" .. require("smol.jsonl").program_name(opts.program) end
  return require("smol.provider.server").program(absolute(file), table.unpack(args))
end

--- Makes every provider this process starts (sandbox.open with any
-- program) the replay of `path`: for `smolwf run/test --replay FILE`.
-- Checks the recording first. Providers already running are shut down
-- (sessions on them end), so that no later session reaches a real one.
-- Returns a handle with :uninstall().
local installed = nil   -- the recording install() made every provider replay

function M.install(path, opts)
  opts = opts or {}
  M.load(path, opts)   -- a clear error now rather than in the provider
  if package.loaded["smol.sandbox"] then package.loaded["smol.sandbox"].shutdown() end
  local jsonl = require "smol.jsonl"
  jsonl.substitute(function(program)
    return M.program(path, {ignore = opts.ignore, program = program})
  end)
  installed = path
  return {uninstall = function() jsonl.substitute(nil); installed = nil end}
end

--- The recording every provider replays (M.install), or nil.
function M.installed()
  return installed
end

--[[
The Slurm allocation of the pool a recorded run had, from its providers'
srun argvs (`srun --jobid=J ... --nodelist=NODE --cpus-per-task=N ...`):
a pool replaying that run takes its nodes from there and runs no Slurm
command (salloc would make a real allocation; a replay runs nothing).
]]
function M.slurm_allocation(path)
  local entries = read_entries(path)
  local job, nodes, cpus = nil, {}, {}
  for i = 2, #entries do
    local program = entries[i].program
    local node = type(program) == "string" and program:match("^srun .-%-%-nodelist=(%S+)")
    if node and not cpus[node] then
      job = job or program:match(" %-%-jobid=(%S+)")
      nodes[#nodes + 1], cpus[node] = node, math.tointeger(tonumber(program:match(" %-%-cpus%-per%-task=(%d+)")))
    end
  end
  if #nodes == 0 then
    error(("replay: recording `%s` has no provider on a Slurm allocation, which this pool would need"):format(path), 0)
  end
  return require("smol.slurm").recorded(job, nodes, cpus)
end

return M
