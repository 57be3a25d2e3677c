-- Golden files: compare a scenario's output with a file kept in the repo
-- (spec/golden/NAME), show a unified diff on mismatch, rewrite on request.
local lfs = require "lfs"

local M = {}

-- Where golden files live, relative to the directory busted runs in.
M.dir = os.getenv("SMOLWF_GOLDEN_DIR") or "spec/golden"
-- `smolwf test --update-golden` sets this; SMOLWF_UPDATE_GOLDEN=1 does too
-- for people who run busted directly.
M.update = os.getenv("SMOLWF_UPDATE_GOLDEN") == "1"

local function check_name(name)
  if type(name) ~= "string" or name == "" then
    error("bad argument #1 to 'golden' (a file name expected, got " .. type(name) .. ")", 3)
  end
  if name:sub(1, 1) == "/" or ("/" .. name .. "/"):find("/%.%./") then
    error(("golden file name `%s` must stay inside %s (no absolute path, no `..`)")
      :format(name, M.dir), 3)
  end
end

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local content = f:read("a")
  f:close()
  return content
end

local function write_all(path, content)
  local f, err = io.open(path, "wb")
  if not f then error("cannot write golden file: " .. err, 0) end
  f:write(content)
  f:close()
end

local function mkdir_p(dir)
  local prefix = dir:sub(1, 1) == "/" and "/" or ""
  for part in dir:gmatch("[^/]+") do
    prefix = prefix .. part .. "/"
    if not lfs.attributes(prefix, "mode") then
      local ok, err = lfs.mkdir(prefix)
      if not ok and not lfs.attributes(prefix, "mode") then
        error(("cannot create golden directory `%s`: %s"):format(prefix, err), 0)
      end
    end
  end
end

local function shell_quote(s)
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

--- A unified diff from `expected_path`'s content to `actual`, made by
-- diffutils' `diff -u` (always installed on Debian).
function M.unified_diff(expected_path, actual, label)
  local tmp = os.tmpname()
  local ok, err = pcall(write_all, tmp, actual)
  if not ok then os.remove(tmp); error(err, 0) end
  local cmd = ("diff -u --label %s --label %s %s %s 2>&1"):format(
    shell_quote(expected_path), shell_quote(label or "actual"),
    shell_quote(expected_path), shell_quote(tmp))
  local pipe = io.popen(cmd, "r")
  local diff = pipe:read("a")
  pipe:close()
  os.remove(tmp)
  return diff
end

--- Compares `actual` with the golden file `name`. Returns true when they are
-- equal (or the file was just written in update mode); raises with a
-- unified diff otherwise.
function M.check(name, actual)
  check_name(name)
  if type(actual) ~= "string" then
    error("bad argument #2 to 'golden' (a string expected, got " .. type(actual) .. ")", 2)
  end
  local path = M.dir .. "/" .. name
  local expected = read_all(path)
  if expected == actual then return true end
  if M.update then
    mkdir_p(path:match("^(.*)/[^/]*$"))
    write_all(path, actual)
    return true
  end
  if expected == nil then
    error(("golden file `%s` does not exist; run `smolwf test --update-golden` to create it")
      :format(path), 2)
  end
  error(("golden file `%s` differs from the actual output"
    .. " (run `smolwf test --update-golden` to accept it):\n%s")
    :format(path, M.unified_diff(path, actual, "actual")), 2)
end

return M
