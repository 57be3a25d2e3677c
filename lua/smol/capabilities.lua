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
                   events) with "output_limit"; else the client cuts the
                   result's copy (host/smolwf/exec_result.c)
  offset, length, append, mode, stat, list_dir   "fs_extra"
  wait, kill, write_stdin                         "process"
  write_archive, read_archive, archive_writer, sandbox.copy   "archive"
                   (smol.archive; save_artifact reads file by file without it)

Whoever keeps a timeout, the client never waits past it for the answer:
an exec with a timeout fails with a "timeout" error once timeout +
sandbox.deadline_grace has passed without its result (smol.sandbox).
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
The wall-clock deadline, in seconds, that the client must keep itself for
an exec/spawn spec with timeouts, or nil when there is none to keep (no
timeouts, or the session keeps them: it gets timeout_ms/idle_timeout_ms).
Raises `unsupported` when the session can keep them neither way. path:
the command, for the error.
]]
function M.client_deadline(session, spec, op, path)
  if spec.timeout == nil and spec.idle_timeout == nil then return nil end
  if session.capabilities.timeout then return nil end
  if spec.idle_timeout ~= nil or op ~= "exec" then M.require(session, "timeout", op, path) end
  M.require(session, "process", op, path)
  return spec.timeout
end

return M
