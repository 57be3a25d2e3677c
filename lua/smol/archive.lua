--[[
smol.archive: tar archives into and out of sandbox sessions, through the
provider's `archive` extension (docs/protocol.md). smol.sandbox installs
these as session methods; a session that does not announce `archive`
raises `unsupported`.

  sb:write_archive(source [, opts]) -> {entries = N, bytes = N}
      source: the tar's bytes (a string), or a function returning its next
      chunk (a string) and nil at its end
      opts.path: the directory to extract into (default: the session's
      cwd), made with its parents when missing
  sb:read_archive(paths [, opts]) -> {entries = N, bytes = N [, data = S]}
      paths: a path or a list of them (files, directories, symlinks)
      opts.cwd: the directory the entries' names start from (default: the
      session's cwd); opts.follow_links: pack what symlinks point to
      opts.to: a function given each chunk in order (it may wait: the
      provider sends at most WINDOW chunks ahead), or a host file path the
      tar is written to; without it the tar is returned as `data`
  sb:archive_writer([opts]) -> writer  (opts as write_archive's)
      w:write(chunk), w:finish() -> {entries, bytes}, w:abort()
  sandbox.copy(from, paths, to [, opts]) -> {entries = N, bytes = N}
      read_archive from one session into write_archive of another;
      opts.cwd and opts.follow_links are from's, opts.path is to's

Neither side holds a whole archive: a write sends chunks of CHUNK bytes,
each once the provider took the one before; a read acknowledges chunks as
they are handed on. Extraction refuses what could leave the target
directory (absolute names, `..`, links out, device files: the provider's
rules); its errors name the entry. After a failure the provider is told
to abort the archive, so nothing of it stays in flight.
]]
local core = require "smol.core"
local errors = require "smol.errors"
local task = require "smol.task"

local archive = {}

-- Bytes per write_archive request; requests of a write, and chunks of a
-- read, that may be unanswered at once (the provider takes at most 4).
archive.CHUNK = 1024 * 1024
archive.WINDOW = 4

local function int(v)
  return type(v) == "number" and (math.tointeger(v) or v) or nil
end

local function stats(r)
  return {entries = int(r.entries), bytes = int(r.bytes)}
end

local function check_opts(opts, n, op)
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #%d to '%s' (table of options expected, got %s)"):format(n, op, type(opts)), 3)
  end
  return opts or {}
end

-- Tells the provider to forget archive id of sb, not waiting for the answer (it may be gone already).
local function abort(sb, id)
  if id and sb._closed == false then
    pcall(sb._conn.notify, sb._conn, "abort_archive", sb:params_json({archive_id = id}))
  end
end

--[[ Writing ]]

local Writer = {}
Writer.__index = Writer

-- One write_archive request with chunk (nil: none); raises after aborting the archive.
function Writer:send(chunk, eof)
  local sb = self.sb
  local fields = {archive_id = self.id, path = not self.id and self.path or nil, eof = eof or nil}
  local raw = chunk and #chunk > 0 and {"data_base64", core.b64encode(chunk)} or nil
  local ok, r = pcall(sb.call, sb, "write_archive", fields, {raw = raw, op = "write_archive", path = self.label})
  if not ok then
    if not self.done and not eof then abort(sb, self.id) end   -- the eof request's failure ends the archive itself
    self.done = true
    error(r, 0)
  end
  self.id = self.id or r.archive_id
  return r
end

-- Waits for the oldest request in flight; true, or false and its error.
function Writer:join_oldest()
  local t = table.remove(self.inflight, 1)
  local ok, err = pcall(t.join, t)
  return ok, err
end

--[[
Once the archive has its id, its requests go out from tasks of their own,
up to WINDOW unanswered: the host encodes the next chunk while the
provider decodes and takes the last. Tasks start in the order they were
made, so the requests leave in order; a failure is raised by the next
write or by finish.
]]
function Writer:send_chunk(chunk)
  if not self.id then self:send(chunk, false) return end
  self.inflight[#self.inflight + 1] = task.spawn(self.send, self, chunk, false)
  while #self.inflight >= archive.WINDOW do
    local ok, err = self:join_oldest()
    if not ok then self:drain() error(err, 0) end
  end
end

-- Waits for every request in flight; the first failure, or nil.
function Writer:drain()
  local first
  while #self.inflight > 0 do
    local ok, err = self:join_oldest()
    first = first or (not ok and err) or nil
  end
  return first
end

function Writer:write(chunk)
  if type(chunk) ~= "string" then error("sandbox: archive writer: chunk must be a string", 2) end
  if self.done then error("sandbox: archive writer: the archive is finished or aborted", 2) end
  for i = 1, #chunk, archive.CHUNK do self:send_chunk(chunk:sub(i, i + archive.CHUNK - 1)) end
end

function Writer:finish()
  if self.done then error("sandbox: archive writer: the archive is finished or aborted", 2) end
  local err = self:drain()
  if err then error(err, 0) end
  local r = self:send(nil, true)
  self.done = true
  return stats(r)
end

function Writer:abort()
  if self.done then return end
  self:drain()
  self.done = true
  abort(self.sb, self.id)
end

local function new_writer(sb, opts, op)
  sb:require_capability("archive", op, opts.path)
  if opts.path ~= nil and type(opts.path) ~= "string" then
    error(("sandbox: %s: path must be a string, got %s"):format(op, type(opts.path)), 3)
  end
  if opts.path then sb:create_dir_all(opts.path) end
  return setmetatable({sb = sb, path = opts.path, label = opts.path or ".", inflight = {}}, Writer)
end

local function write_from(w, source)
  if type(source) == "string" then
    w:write(source)
    return
  end
  for chunk in source do w:write(chunk) end
end

local function write_archive(sb, source, opts)
  if type(source) ~= "string" and type(source) ~= "function" then
    error(("bad argument #1 to 'write_archive' (string or function expected, got %s)"):format(type(source)), 3)
  end
  local w = new_writer(sb, opts, "write_archive")
  local ok, err = pcall(write_from, w, source)
  if not ok then w:abort(); error(err, 0) end
  return w:finish()
end

--[[ Reading ]]

local function check_paths(paths)
  if type(paths) == "string" then return {paths} end
  if type(paths) ~= "table" or #paths == 0 then
    error("bad argument #1 to 'read_archive' (a path or a non-empty list of paths expected)", 4)
  end
  for i, p in ipairs(paths) do
    if type(p) ~= "string" then error(("sandbox: read_archive: paths[%d] must be a string"):format(i), 4) end
  end
  return paths
end

-- Where the chunks go: deliver(chunk), and finish() -> the data when kept in memory.
local function sink_of(to)
  if type(to) == "function" then return to, function() end end
  if type(to) == "string" then
    local f, err = io.open(to, "wb")
    if not f then errors.raise{code = "io_error", op = "read_archive", path = to, message = tostring(err)} end
    return function(chunk) assert(f:write(chunk)) end, function() f:close() end
  end
  if to ~= nil then error("sandbox: read_archive: `to` must be a function or a file path", 4) end
  local parts = {}
  return function(chunk) parts[#parts + 1] = chunk end, function() return table.concat(parts) end
end

local function protocol_error(message)
  errors.raise{code = "protocol", op = "read_archive", message = message}
end

-- The bytes of a chunk event: the connection decodes them into `data` (smol.conn); a
-- data_base64 it could not decode is checked here, to say why.
local function chunk_bytes(ev)
  if type(ev.data) == "string" then return ev.data end
  local text = ev.data_base64
  if text == nil then return "" end
  if type(text) ~= "string" then protocol_error("read_archive chunk: data_base64 is not a string") end
  local data, err = core.b64decode(text)
  if not data then protocol_error("read_archive chunk: data_base64 is " .. tostring(err)) end
  return data
end

-- One event of a read: started (the id), then chunks, each handed on and then acknowledged.
local function on_read_event(ev, st)
  if ev.type == "started" then
    st.id = ev.archive_id
  elseif ev.type == "chunk" then
    st.deliver(chunk_bytes(ev))
    st.chunks = st.chunks + 1
    local sb = st.sb
    sb._conn:notify("read_archive_ack", sb:params_json({archive_id = st.id, chunks = st.chunks}))
  else
    protocol_error(("unknown read_archive event type `%s`"):format(tostring(ev.type)))
  end
end

local function read_archive(sb, paths, opts)
  paths = check_paths(paths)
  local label = table.concat(paths, ", ")
  sb:require_capability("archive", "read_archive", label)
  local deliver, finish = sink_of(opts.to)
  local st = {sb = sb, deliver = deliver, chunks = 0}
  local fields = {paths = paths, cwd = opts.cwd, window = archive.WINDOW, follow_links = opts.follow_links or nil}
  local ok, r = pcall(sb.call, sb, "read_archive", fields, {op = "read_archive", path = label,
    on_event = function(ev) on_read_event(ev, st) end})
  local data = finish()
  if not ok then
    abort(sb, st.id)   -- when the reply was an error the archive is over already, and this is ignored
    error(r, 0)
  end
  local result = stats(r)
  if opts.to == nil then result.data = data end
  return result
end

--[[ Installing ]]

-- (The methods keep their frame, no tail calls: misuse is reported at their caller's line.)
function archive.install(Session, sandbox, check_open)
  function Session:write_archive(source, opts)
    check_open(self, "write_archive")
    local r = write_archive(self, source, check_opts(opts, 2, "write_archive"))
    return r
  end

  function Session:read_archive(paths, opts)
    check_open(self, "read_archive")
    local r = read_archive(self, paths, check_opts(opts, 2, "read_archive"))
    return r
  end

  function Session:archive_writer(opts)
    check_open(self, "archive_writer")
    local w = new_writer(self, check_opts(opts, 1, "archive_writer"), "write_archive")
    return w
  end

  function sandbox.copy(from, paths, to, opts)
    opts = check_opts(opts, 4, "copy")
    check_open(from, "copy")
    local w = to:archive_writer{path = opts.path}
    local ok, r = pcall(read_archive, from, paths, {cwd = opts.cwd, follow_links = opts.follow_links,
      to = function(chunk) w:write(chunk) end})
    if not ok then w:abort(); error(r, 0) end
    return w:finish()
  end
end

return archive
