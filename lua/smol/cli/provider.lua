-- `smolwf provider serve FILE.lua [ARGS...]`: hosts a provider written in Lua.
-- FILE.lua is run with ARGS as `...` and returns its table of methods; see
-- smol.provider.server for what the host does around them and
-- scripts/lua_provider.lua for a complete example.
local M = {}

M.usage = [[
usage: smolwf provider serve FILE.lua [ARGS...]

Serves the sandbox provider protocol (JSON Lines on stdin/stdout) with the
methods that FILE.lua returns. ARGS are passed to FILE.lua as `...`.
A host starts a provider as `PROGRAM serve`, so `smolwf provider FILE.lua
[ARGS...] serve` does the same: that is how
sandbox.open{program = {"smolwf", "provider", "FILE.lua", ARGS...}} serves
FILE.lua (require("smol.provider.server").program(FILE, ARGS...) makes that
list).

options:
  --help            this text

exit status: 0 served until shutdown or end of input, 1 the server failed,
2 usage error or FILE.lua did not load (or did not return a table).
]]

local USAGE_LINE = M.usage:match("^[^\n]*\n")

local function fail(message)
  io.stderr:write("smolwf provider: ", message, "\n")
  return 2
end

-- A usage error: one line saying what was wrong and where to read more;
-- with_usage adds the usage line (for a missing or unknown subcommand).
local function usage_error(message, with_usage)
  local line = message .. " (see smolwf provider --help)"
  return fail(with_usage and (line .. "\n" .. USAGE_LINE:sub(1, -2)) or line)
end

local function is_help(a) return a == "-h" or a == "--help" end

--- Loads FILE.lua and returns its methods table, or nil and a message.
function M.load_methods(file, args)
  local chunk, err = loadfile(file)
  if not chunk then return nil, err end
  local ok, methods = pcall(chunk, table.unpack(args, 1, args.n or #args))
  if not ok then return nil, ("%s failed: %s"):format(file, tostring(methods)) end
  if type(methods) ~= "table" then
    return nil, ("%s must return a table of methods, got %s"):format(file, type(methods))
  end
  return methods
end

-- `serve FILE.lua [ARGS...]`, args[1] being FILE.lua.
local function serve(args)
  local file = args[1]
  if not file then return usage_error("serve needs FILE.lua", true) end
  if is_help(file) then io.stdout:write(M.usage); return 0 end
  if file:sub(1, 1) == "-" then return usage_error(("unknown option '%s'"):format(file)) end
  local methods, err = M.load_methods(file, table.pack(table.unpack(args, 2)))
  if not methods then return fail(err) end
  local ok, perr = pcall(require("smol.provider.server").serve, methods)
  if not ok then io.stderr:write("smolwf provider: ", tostring(perr), "\n"); return 1 end
  return 0
end

function M.main(args)
  local sub = args[1]
  if is_help(sub) then io.stdout:write(M.usage); return 0 end
  if sub == "serve" then return serve(table.pack(table.unpack(args, 2))) end
  if sub == nil then return usage_error("missing subcommand", true) end
  if sub:sub(1, 1) == "-" then return usage_error(("unknown option '%s'"):format(sub)) end
  -- `FILE.lua [ARGS...] serve`: how a host starts {"smolwf", "provider", FILE, ARGS...}
  if #args >= 2 and args[#args] == "serve" then return serve(table.pack(table.unpack(args, 1, #args - 1))) end
  return usage_error(("unknown subcommand '%s'"):format(sub), true)
end

return setmetatable(M, {__call = function(_, args) return M.main(args) end})
