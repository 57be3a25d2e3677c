-- The explicit environment a workflow file is loaded in (STYLE.md pattern
-- 12): an allow-listed set of globals; reading an unknown global raises
-- (a typo is an error, not a silent nil). New globals may still be defined.
local M = {}

local ALLOWED = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "print", "rawequal", "rawget",
  "rawlen", "rawset", "select", "setmetatable", "getmetatable", "tonumber", "tostring",
  "type", "xpcall", "_VERSION", "collectgarbage", "load", "loadfile", "dofile", "require",
  "warn", "string", "table", "math", "utf8", "os", "io", "coroutine", "debug", "package",
}

local STRICT_MT = {
  __index = function(_, name)
    error(("undefined global '%s'"):format(tostring(name)), 2)
  end,
}

-- The last os.exit called from workflow code: {status, task} (the task it
-- was called in, nil outside one), so that the run it ends can say so.
local exit_request

-- The os tables made below, and the environments (weak: for the step
-- cache, which names them rather than hashing their contents).
local os_tables = setmetatable({}, { __mode = "k" })
local envs = setmetatable({}, { __mode = "k" })

-- os for workflow code: the same functions, but os.exit is noted first.
local function workflow_os()
  local os_table = {}
  for k, v in pairs(os) do os_table[k] = v end
  local real_exit = os.exit
  os_table.exit = function(status, close)
    exit_request = { status = status == nil and 0 or status, task = require("smol.task").current() }
    return real_exit(status, close)
  end
  os_tables[os_table] = true
  return os_table
end

function M.exit_request()
  return exit_request
end

local BUILTIN = { _G = true, os = true }
for _, name in ipairs(ALLOWED) do BUILTIN[name] = true end

--- Whether `name` is a global every workflow environment has.
function M.is_builtin(name)
  return BUILTIN[name] == true
end

--- Whether t is a workflow environment made by M.new.
function M.is_env(t)
  return envs[t] == true
end

--- Whether t is the os table of a workflow environment.
function M.is_os(t)
  return os_tables[t] == true
end

-- `extra` adds globals (e.g. arg).
function M.new(extra)
  local env = {}
  for _, name in ipairs(ALLOWED) do env[name] = _G[name] end
  env.os = workflow_os()
  for k, v in pairs(extra or {}) do env[k] = v end
  env._G = env
  envs[env] = true
  return setmetatable(env, STRICT_MT)
end

-- "-" reads the script from stdin, as lua.c does.
local function read_source(path)
  local f, err = io.stdin, nil
  if path ~= "-" then f, err = io.open(path, "rb") end
  if not f then return nil, ("cannot open %s"):format(err) end
  local src, read_err = f:read("a")
  if f ~= io.stdin then f:close() end
  -- io.open succeeds on a directory; the read is what fails.
  if not src then return nil, ("cannot read %s: %s"):format(path, tostring(read_err)) end
  -- A "#!" first line is not Lua; comment it out, keeping line numbers.
  if src:sub(1, 2) == "#!" then src = "--" .. src:sub(3) end
  return src
end

-- Compiles the file at `path` in a fresh environment; returns the chunk or
-- nil, message (cannot read, syntax error).
function M.load_file(path, extra)
  local src, err = read_source(path)
  if not src then return nil, err end
  return load(src, path == "-" and "=stdin" or ("@" .. path), "t", M.new(extra))
end

return M
