-- Assertions for scenario specs, registered with busted's luassert:
--   assert.exec_ok(r)                    assert.exit_code(3, r)
--   assert.stdout_matches(pattern, r)    assert.file_exists(sb, path)
--   assert.file_contains(sb, path, text)
-- Each one builds its whole failure message itself (the command, the exit
-- code, the tail of the output), because luassert's default formatting would
-- print an exec result as a bare table dump.
local luassert = require "luassert"
local say = require "say"

local M = {}

-- How many trailing lines of stderr/stdout a failure message shows.
M.tail_lines = 10

--- The last `n` lines of `text`, each prefixed with "    | ".
function M.tail(text, n)
  text = text or ""
  if text == "" then return "    (empty)" end
  local lines = {}
  for line in (text:gsub("\n$", "") .. "\n"):gmatch("(.-)\n") do
    lines[#lines + 1] = line
  end
  local first = math.max(1, #lines - (n or M.tail_lines) + 1)
  local out = {}
  if first > 1 then out[1] = ("    ... (%d earlier lines)"):format(first - 1) end
  for i = first, #lines do out[#out + 1] = "    | " .. lines[i] end
  return table.concat(out, "\n")
end

local shell_quote = require("smol.shell").quote

--- The command of an exec or wait result (`r.argv`, which smol.sandbox
--- puts there) as a shell-like line; a placeholder for a
--- result made some other way.
function M.command_of(r)
  local argv = r.argv
  if type(argv) ~= "table" then return "(command not recorded in the result)" end
  local words = {}
  for i, word in ipairs(argv) do words[i] = shell_quote(tostring(word)) end
  return table.concat(words, " ")
end

--- "exit code 3", "exit code 137 (signal KILL)", "... (timed out: wall)".
function M.describe_exit(r)
  local text = ("exit code %s"):format(tostring(r.exit_code))
  if r.signal then text = text .. (" (signal %s)"):format(r.signal) end
  if r.timed_out then text = text .. (" (timed out: %s)"):format(tostring(r.timed_out)) end
  return text
end

local function check_result(r, name, position)
  if type(r) ~= "table" or r.exit_code == nil then
    error(("bad argument #%d to 'assert.%s' (an exec result expected, got %s)")
      :format(position, name, type(r) == "table" and "a table without exit_code" or type(r)), 4)
  end
end

-- Replaces luassert's argument list by one preformatted message.
local function set_message(arguments, message)
  for i = 1, arguments.n or #arguments do arguments[i] = nil end
  arguments[1], arguments.n, arguments.nofmt = message, 1, {true}
end

local function register(name, callback)
  local positive = "assertion.smol." .. name .. ".positive"
  local negative = "assertion.smol." .. name .. ".negative"
  say:set(positive, "%s")
  say:set(negative, "%s")
  luassert:register("assertion", name, callback, positive, negative)
end

local function exec_ok(state, arguments)
  local r = arguments[1]
  check_result(r, "exec_ok", 1)
  local ok = r.exit_code == 0 and not r.signal and not r.timed_out
  local header = ok and "Expected command to fail, but it succeeded:"
    or "Expected command to succeed:"
  set_message(arguments, ("%s\n  %s\n  %s\n  stderr (last %d lines):\n%s"):format(
    header, M.command_of(r), M.describe_exit(r), M.tail_lines, M.tail(r.stderr)))
  return ok
end

local function exit_code(state, arguments)
  local expected, r = arguments[1], arguments[2]
  if math.type(expected) ~= "integer" and not (type(expected) == "number" and expected % 1 == 0) then
    error("bad argument #1 to 'assert.exit_code' (an integer expected, got "
      .. type(expected) .. ")", 3)
  end
  check_result(r, "exit_code", 2)
  local same = r.exit_code == expected
  set_message(arguments, ("Expected exit code %s%d, got %s:\n  %s\n  stderr (last %d lines):\n%s")
    :format(same and "other than " or "", expected, M.describe_exit(r), M.command_of(r),
      M.tail_lines, M.tail(r.stderr)))
  return same
end

local function stdout_matches(state, arguments)
  local pattern, r = arguments[1], arguments[2]
  if type(pattern) ~= "string" then
    error("bad argument #1 to 'assert.stdout_matches' (a Lua pattern expected, got "
      .. type(pattern) .. ")", 3)
  end
  check_result(r, "stdout_matches", 2)
  local found = (r.stdout or ""):find(pattern) ~= nil
  set_message(arguments, ("Expected stdout %sto match pattern %q:\n  %s\n  %s\n  stdout (last %d lines):\n%s")
    :format(found and "not " or "", pattern, M.command_of(r), M.describe_exit(r),
      M.tail_lines, M.tail(r.stdout)))
  return found
end

local function check_sandbox(sb, path, name)
  if type(sb) ~= "table" and type(sb) ~= "userdata" then
    error(("bad argument #1 to 'assert.%s' (a sandbox expected, got %s)"):format(name, type(sb)), 4)
  end
  if type(path) ~= "string" then
    error(("bad argument #2 to 'assert.%s' (a path expected, got %s)"):format(name, type(path)), 4)
  end
end

--- Reads a sandbox file; nil when it does not exist. Other errors propagate:
-- a broken session must not pass for a missing file.
function M.read_if_exists(sb, path)
  local ok, content = pcall(sb.read_file, sb, path)
  if ok then return content end
  if type(content) == "table" and (content.code == "not_found" or content.code == "is_a_directory") then
    return nil, content.code
  end
  error(content, 0)
end

local function file_exists(state, arguments)
  local sb, path = arguments[1], arguments[2]
  check_sandbox(sb, path, "file_exists")
  local content, why = M.read_if_exists(sb, path)
  local exists = content ~= nil or why == "is_a_directory"
  set_message(arguments, ("Expected `%s` %sto exist in the sandbox%s")
    :format(path, exists and "not " or "", sb.id and (" (session " .. tostring(sb.id) .. ")") or ""))
  return exists
end

local function file_contains(state, arguments)
  local sb, path, text = arguments[1], arguments[2], arguments[3]
  check_sandbox(sb, path, "file_contains")
  if type(text) ~= "string" then
    error("bad argument #3 to 'assert.file_contains' (a string expected, got " .. type(text) .. ")", 3)
  end
  local content = M.read_if_exists(sb, path)
  local found = content ~= nil and content:find(text, 1, true) ~= nil
  local shown = content == nil and "    (the file does not exist)" or M.tail(content)
  set_message(arguments, ("Expected `%s` %sto contain %q:\n  content (last %d lines):\n%s")
    :format(path, found and "not " or "", text, M.tail_lines, shown))
  return found
end

register("exec_ok", exec_ok)
register("exit_code", exit_code)
register("stdout_matches", stdout_matches)
register("file_exists", file_exists)
register("file_contains", file_contains)

return M
