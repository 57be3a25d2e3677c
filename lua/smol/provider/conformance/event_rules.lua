-- The rules for the events of exec, spawn and wait, and the output they carry.
--
-- exec:  started, then stdout/stderr chunks, then exactly one exited (last),
--        then the terminal result; exited's exit_code equals the result's.
-- spawn: started (output the process wrote meanwhile may follow), then the result.
-- wait:  stdout/stderr/dropped chunks, then exited when the process ended.
local core = require "smol.core"
local cjson = require "cjson"

local events = {}

local OUTPUT = {stdout = true, stderr = true}

local function decode(b64)
  if b64 == nil or b64 == cjson.null then return "" end
  if type(b64) ~= "string" then return nil, "not a string" end
  return core.b64decode(b64)
end

-- Output a request's events carried for `stream`, or nil and what was wrong.
function events.collected(req, stream)
  local parts = {}
  for i, ev in ipairs(req.events) do
    if ev.type == stream then
      local data, err = decode(ev.data_base64)
      if not data then return nil, string.format("event %d: data_base64 %s", i, err) end
      parts[#parts + 1] = data
    end
  end
  return table.concat(parts)
end

-- A result field `NAME_base64` decoded, or nil and what was wrong.
function events.field(result, name)
  if type(result) ~= "table" then return nil, "no result" end
  local data, err = decode(result[name .. "_base64"])
  if not data then return nil, name .. "_base64: " .. tostring(err) end
  return data
end

local function types_of(req)
  local t = {}
  for _, ev in ipairs(req.events) do
    t[#t + 1] = type(ev) == "table" and tostring(ev.type) or "?"
  end
  return table.concat(t, ",")
end

local function exit_code_of(ev)
  if ev.exit_code == nil or ev.exit_code == cjson.null then return -1 end
  return ev.exit_code
end

local function check_middle(req, first, last, allowed)
  for i = first, last do
    local ev = req.events[i]
    if type(ev) ~= "table" or not allowed[ev.type] then
      return string.format("event %d is `%s`, expected output", i,
        type(ev) == "table" and tostring(ev.type) or "?")
    end
  end
end

-- nil when an exec's events follow the rules, else what is wrong.
function events.exec_problem(req)
  local evs = req.events
  local n = #evs
  if n < 2 then return "expected at least started and exited, got [" .. types_of(req) .. "]" end
  if type(evs[1]) ~= "table" or evs[1].type ~= "started" then
    return "first event is not started: [" .. types_of(req) .. "]"
  end
  if type(evs[n]) ~= "table" or evs[n].type ~= "exited" then
    return "last event is not exited: [" .. types_of(req) .. "]"
  end
  local bad = check_middle(req, 2, n - 1, OUTPUT)
  if bad then return bad .. ": [" .. types_of(req) .. "]" end
  if type(req.result) == "table" and exit_code_of(evs[n]) ~= req.result.exit_code then
    return string.format("exited says exit_code %s, the result %s",
      tostring(exit_code_of(evs[n])), tostring(req.result.exit_code))
  end
end

-- nil when the streamed output equals the result's copy (for untruncated streams).
function events.output_problem(req)
  for stream in pairs(OUTPUT) do
    local streamed, err = events.collected(req, stream)
    if not streamed then return err end
    if not (type(req.result) == "table" and req.result[stream .. "_truncated"] == true) then
      local captured, ferr = events.field(req.result, stream)
      if not captured then return ferr end
      if captured ~= streamed then
        return string.format("%s events carried %d bytes, the result %d (or different bytes)",
          stream, #streamed, #captured)
      end
    end
  end
end

-- nil when a spawn's events are started, then at most some early output.
function events.spawn_problem(req)
  if type(req.events[1]) ~= "table" or req.events[1].type ~= "started" then
    return "expected events [started], got [" .. types_of(req) .. "]"
  end
  local bad = check_middle(req, 2, #req.events, OUTPUT)
  if bad then return bad .. ": [" .. types_of(req) .. "]" end
end

events.types_of = types_of
events.exit_code_of = exit_code_of

return events
