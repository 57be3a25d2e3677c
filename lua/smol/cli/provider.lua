-- `smolwf provider serve FILE.lua [ARGS...]`: hosts a provider written in Lua.
-- FILE.lua is run with ARGS as `...` and returns its table of methods; see
-- smol.provider_server for what the host does around them and
-- scripts/lua_provider.lua for a complete example.
local M = {}

M.usage = [[
usage: smolwf provider serve FILE.lua [ARGS...]

Serves the sandbox provider protocol (JSON Lines on stdin/stdout) with the
methods that FILE.lua returns. ARGS are passed to FILE.lua as `...`.
A host starts providers as `PROGRAM serve`: wrap this command in a small
script to use it as sandbox.open{program = ...}.
]]

local function fail(message)
  io.stderr:write("smolwf provider: ", message, "\n")
  return 2
end

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

function M.main(args)
  if args[1] == "-h" or args[1] == "--help" then
    io.stdout:write(M.usage)
    return 0
  end
  if args[1] ~= "serve" then return fail("unknown subcommand `" .. tostring(args[1]) .. "`\n" .. M.usage) end
  local file = args[2]
  if not file then return fail("missing FILE.lua\n" .. M.usage) end
  local rest = table.pack(table.unpack(args, 3))
  local methods, err = M.load_methods(file, rest)
  if not methods then return fail(err) end
  local ok, perr = pcall(require("smol.provider_server").serve, methods)
  if not ok then return fail(tostring(perr)) end
  return 0
end

return setmetatable(M, {__call = function(_, args) return M.main(args) end})
