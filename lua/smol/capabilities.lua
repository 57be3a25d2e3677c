--[[
smol.capabilities: what a session can do, decided in one place.

A session announces its extensions in `capabilities` (docs/protocol.md,
"Extensions"). For every option or method that needs one, the client
either sends it (announced), enforces it itself, or raises `unsupported`;
nothing is silently dropped:

  timeout          sent as timeout_ms with "timeout"; else enforced here
                   with "process" (the command is killed through the
                   session when the deadline passes: timed_out = "wall")
  idle_timeout     sent with "timeout"; else unsupported
  max_output_bytes sent (as 0: the client keeps the output from the
                   events) with "output_limit"; else the result's copy is
                   cut here
  offset, length, append, mode, stat, list_dir   "fs_extra"
  wait, kill, write_stdin                         "process"
]]

local errors = require "smol.errors"

local M = {}

-- Raises `unsupported` unless the session announces cap.
function M.require(session, cap, op, path)
  if session.capabilities[cap] then return end
  errors.raise{code = "unsupported", op = op, path = path,
    message = ("session %s of provider `%s` does not announce the %q capability")
      :format(session.id, session.program_label or tostring(session.program), cap)}
end

--[[
How an exec/spawn spec's timeouts are honoured: returns send (the
provider gets timeout_ms/idle_timeout_ms) and, when the client enforces
the wall clock itself, its seconds. path: the command, for the error.
]]
function M.timeouts(session, spec, op, path)
  local caps = session.capabilities
  if spec.timeout == nil and spec.idle_timeout == nil then return false, nil end
  if caps.timeout then return true, nil end
  if spec.idle_timeout ~= nil then M.require(session, "timeout", op, path) end
  if op ~= "exec" then M.require(session, "timeout", op, path) end
  M.require(session, "process", op, path)
  return false, spec.timeout
end

-- How exec keeps its output: "none" (capture = false), "events" (the
-- client keeps it from the events: output_limit) or "result" (the
-- result's own copy, cut to the cap by the client).
function M.exec_capture(session, spec)
  if spec.capture == false then return "none" end
  return session.capabilities.output_limit and "events" or "result"
end

return M
