--[[
The `archive` extension over a raw connection (wire.lua): a tar streamed
into a session with write_archive and out with read_archive, as
docs/protocol.md describes them. The conformance kit's archive checks and
the bundled provider's specs share it.

  local archive_stream = require "smol.provider.conformance.archive_stream"
  local req = archive_stream.write(conn, session, tar_bytes, {path = "dir", chunk = 65536, window = 4})
  local req = archive_stream.read(conn, session, {"a", "b"}, {cwd = "...", window = 2})
  -- req.data: the tar; req.chunks: how many chunk events; req.problem: what broke the event rules
]]
local core = require "smol.core"

local archive_stream = {}

local b64 = core.b64encode

-- Bytes per write_archive request, and requests left unanswered at once, by default.
archive_stream.CHUNK = 64 * 1024
archive_stream.WINDOW = 4

local function write_params(session, id, data, eof, path)
  return {session = session, archive_id = id, path = path, data_base64 = b64(data), eof = eof}
end

local function wait_all(conn, reqs, timeout)
  for _, req in ipairs(reqs) do conn:wait(req, timeout) end
end

-- The first of reqs that ended without a result (an error, or no reply at all), or nil.
local function first_bad(reqs)
  for _, req in ipairs(reqs) do
    if req.done and not req.result then return req end
  end
end

--[[
Streams `data` (a tar) into the session: a first request with the target
(opts.path) and the first chunk, then the rest in opts.chunk bytes with at
most opts.window requests unanswered, the last with eof. Returns the record
of the eof request, or of the first request that failed (after an
abort_archive that lets the provider forget the archive); req.archive_id
is the archive's id when it got one.
]]
function archive_stream.write(conn, session, data, opts)
  opts = opts or {}
  local chunk, window = opts.chunk or archive_stream.CHUNK, opts.window or archive_stream.WINDOW
  local first = conn:call("write_archive", write_params(session, nil, data:sub(1, chunk), #data <= chunk, opts.path),
    {timeout = opts.timeout})
  if not first.result or #data <= chunk then return first end
  local id, inflight, pos = first.result.archive_id, {}, chunk + 1
  while pos <= #data and not first_bad(inflight) do
    if #inflight >= window then conn:wait(table.remove(inflight, 1), opts.timeout) end
    local eof = pos + chunk > #data
    inflight[#inflight + 1] = conn:send("write_archive", write_params(session, id, data:sub(pos, pos + chunk - 1), eof))
    pos = pos + chunk
  end
  wait_all(conn, inflight, opts.timeout)
  local bad = first_bad(inflight)
  for _, req in ipairs(inflight) do bad = bad or (not req.done and req) end
  if bad and bad ~= inflight[#inflight] then
    conn:call("abort_archive", {session = session, archive_id = id})
  end
  local last = bad or inflight[#inflight]
  last.archive_id = id
  return last
end

-- What is wrong with the events of a read_archive, or nil.
local function read_problem(req)
  local evs = req.kinds
  if evs[1] ~= "started" then return "first event is " .. tostring(evs[1]) .. ", not started" end
  for i = 2, #evs do
    if evs[i] ~= "chunk" then return "event " .. i .. " is " .. tostring(evs[i]) .. ", not chunk" end
  end
end

--[[
Reads a tar of `paths` out of the session (names relative to opts.cwd,
default the session's cwd). With opts.window (default 2; false for none)
each chunk is acknowledged as it comes. Returns the request record with
.data (the chunks' bytes), .chunks, .archive_id and .problem (the event
rules broken, or nil).
]]
function archive_stream.read(conn, session, paths, opts)
  opts = opts or {}
  local window = opts.window == nil and 2 or opts.window or nil
  local parts, state = {}, {kinds = {}}
  local params = {session = session, paths = paths, cwd = opts.cwd, window = window, follow_links = opts.follow_links}
  local req = conn:send("read_archive", params, {
    discard_events = true,
    on_event = function(ev)
      state.kinds[#state.kinds + 1] = ev.type
      if ev.type == "started" then state.id = ev.archive_id end
      if ev.type ~= "chunk" then return end
      parts[#parts + 1] = core.b64decode(ev.data_base64 or "") or ""
      if window and opts.ack ~= false then
        conn:send("read_archive_ack", {session = session, archive_id = state.id, chunks = #parts})
      end
      if opts.on_chunk then opts.on_chunk(#parts, state.id) end
    end,
  })
  conn:wait(req, opts.timeout)
  req.data, req.chunks, req.archive_id, req.kinds = table.concat(parts), #parts, state.id, state.kinds
  req.problem = read_problem(req)
  return req
end

return archive_stream
