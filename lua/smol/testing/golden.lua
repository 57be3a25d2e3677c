-- Golden files: compare a scenario's output with a file kept in the repo
-- (spec/golden/NAME), show a unified diff on mismatch, rewrite on request.
local fs = require "smol.fs"

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

local shell_quote = require("smol.shell").quote

--- A unified diff from `expected_path`'s content to `actual`, made by
-- diffutils' `diff -u` (always installed on Debian).
function M.unified_diff(expected_path, actual, label)
  local dir = fs.temp_dir("smolwf-golden")   -- under $TMPDIR, unlike os.tmpname
  local tmp = dir .. "/actual"
  local ok, err = pcall(fs.write_file, tmp, actual)
  if not ok then fs.remove_tree(dir); error(err, 0) end
  local cmd = ("diff -u --label %s --label %s %s %s 2>&1"):format(
    shell_quote(expected_path), shell_quote(label or "actual"),
    shell_quote(expected_path), shell_quote(tmp))
  local pipe = io.popen(cmd, "r")
  local diff = pipe:read("a")
  pipe:close()
  fs.remove_tree(dir)
  return diff
end

-- Raises `message` at the caller of testing.golden (3 levels up from here;
-- testing.golden tail-calls it). Inside busted, through luassert, so that
-- a mismatch counts as a test failure, as any assertion does, not as an
-- error in the test.
local function fail(message)
  local ok, luassert = pcall(require, "luassert")
  if ok then luassert(false, message, luassert:level(3)) end
  error(message, 3)
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
  local expected = fs.try_read_file(path)
  if expected == actual then return true end
  if M.update then
    fs.mkdir_p(path:match("^(.*)/[^/]*$"))
    fs.write_file(path, actual)
    return true
  end
  if expected == nil then
    fail(("golden file `%s` does not exist; run `smolwf test --update-golden` to create it"):format(path))
  end
  fail(("golden file `%s` differs from the actual output"
    .. " (run `smolwf test --update-golden` to accept it):\n%s")
    :format(path, M.unified_diff(path, actual, "actual")))
end

return M
