--[[
A provider written in Lua that forwards every session to another machine:
it runs `ssh DESTINATION smolwf-provider serve` and passes each request on,
streaming the remote events back.

  smolwf provider serve scripts/ssh_provider.lua DESTINATION [--remote=CMD] [SSH OPTIONS...]

  local server = require "smol.provider.server"
  local sb = sandbox.open{
    program = server.program("scripts/ssh_provider.lua", "build-box",
                             "--remote=/usr/local/bin/smolwf-provider", "-p", "2222"),
    profile = "bwrap/default", workspace = "/srv/checkout",
  }

--remote=CMD is the provider command on the remote machine (default
`smolwf-provider`); every other argument is given to ssh before the
destination. ssh runs with BatchMode=yes: set keys up beforehand.

What forwarding means here: the remote provider does all the work, so
paths (including workspace_sync.host_path) are paths on the remote
machine; the workspace must already be there (rsync it first, or use a
shared filesystem). One ssh connection serves every session; if it dies,
pending requests fail with `io_error` naming the destination, and the next
request connects again.
]]
local jsonl = require "smol.jsonl"
local server = require "smol.provider.server"

local function parse_args(...)
  local args = {...}
  local cfg = {destination = args[1], remote = "smolwf-provider", ssh_options = {}}
  if not cfg.destination or cfg.destination:sub(1, 1) == "-" then
    error("usage: smolwf provider serve ssh_provider.lua DESTINATION [--remote=CMD] [SSH OPTIONS...]", 0)
  end
  for i = 2, #args do
    local remote = args[i]:match("^%-%-remote=(.+)$")
    if remote then cfg.remote = remote else cfg.ssh_options[#cfg.ssh_options + 1] = args[i] end
  end
  return cfg
end

local cfg = parse_args(...)
local conn

-- ssh with its own arguments, then the destination, then the remote
-- provider (the host appends its "serve").
local function ssh_argv()
  local argv = {"ssh", "-o", "BatchMode=yes", "-T"}
  for _, opt in ipairs(cfg.ssh_options) do argv[#argv + 1] = opt end
  for _, word in ipairs{cfg.destination, cfg.remote} do argv[#argv + 1] = word end
  return argv
end

local function connection()
  if conn and conn:alive() then return conn end
  conn = jsonl.start(ssh_argv(), {on_stderr = function(line)
    io.stderr:write("[ssh ", cfg.destination, "] ", line, "\n")
  end})
  return conn
end

-- Errors of the remote provider pass through as they are; a broken or
-- lost ssh connection becomes io_error naming the destination.
local function forward_error(method, err)
  if type(err) == "table" and (err.code == "provider_exited" or err.code == "protocol") then
    server.fail("io_error", ("%s via ssh to %s: %s"):format(method, cfg.destination, tostring(err.message)))
  end
  error(err, 0)
end

local function forward(_, req)
  local ok, result = pcall(connection().request, connection(), req.method, req.raw or {},
    function(ev) req:event(ev) end)
  if not ok then forward_error(req.method, result) end
  return result
end

local methods = {["*"] = forward}

-- After the server closed every session (through "*"), let the remote
-- provider go too.
function methods.shutdown()
  if conn then conn:shutdown(2) end
  return {}
end

return methods
