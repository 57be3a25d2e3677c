-- Every `smolwf COMMAND` (one module per command in lua/smol/cli/) answers
-- --help and a bad option the same way as `smolwf run`: help on stdout with
-- a usage line, an options block and the exit status, status 0; a bad
-- option named on one stderr line, status 2. Runs the real smolwf.
local core = require "smol.core"
local lfs = require "lfs"
local sandbox = require "smol.sandbox"
require "smol.testing"   -- assert.exec_ok, assert.exit_code

local OPTION_COLUMN = 21   -- where an option's description starts, as in `smolwf run --help`

local function commands()
  local names = {}
  for file in lfs.dir(core.exe_path():match("^(.*)/") .. "/lua/smol/cli") do
    local name = file:match("^(.-)%.lua$")
    if name then names[#names + 1] = (name:gsub("_", "-")) end
  end
  table.sort(names)
  return names
end

local function smolwf(...)
  return sandbox.host{}:exec{core.exe_path(), ...}
end

-- Lines of the options block (from "options:" to the next blank line) that name an option.
local function option_lines(help)
  local block = help:match("\noptions:\n(.-)\n\n")
  assert.is_not_nil(block, "no options block followed by a blank line")
  local lines = {}
  for line in block:gmatch("[^\n]+") do
    if line:match("^  %-") then lines[#lines + 1] = line end
  end
  return lines
end

describe("smolwf COMMAND --help", function()
  it("finds the commands", function()
    assert.is_true(#commands() >= 4, table.concat(commands(), ", "))
  end)

  for _, command in ipairs(commands()) do
    it(command .. ": usage line, options, exit status on stdout; status 0", function()
      local r = smolwf(command, "--help")
      assert.exec_ok(r)
      assert.same("", r.stderr)
      assert.matches("^usage: smolwf " .. command:gsub("%-", "%%-") .. " [^\n]+\n\n", r.stdout)
      local lines = option_lines(r.stdout)
      assert.is_true(#lines > 0, "no option listed")
      for _, line in ipairs(lines) do
        assert.matches("^  %-%S.- +%S", line)
        local column = line:find("%S", (line:find("%s%s", 3)))   -- the description
        assert.same(OPTION_COLUMN, column, "misaligned: " .. line)
      end
      assert.matches("\n  %-%-help +this text\n", r.stdout)
      assert.matches("\nexit status: 0 [^\n]+", r.stdout)
      local status = r.stdout:match("\nexit status: (.*)$"):gsub("\n", " ")
      assert.matches("[ ,]2 [%w ]*usage", status)
    end)

    it(command .. ": a bad option is named on one line; status 2", function()
      local r = smolwf(command, "--no-such-option")
      assert.exit_code(2, r)
      assert.same("", r.stdout)
      assert.matches("^smolwf " .. command:gsub("%-", "%%-")
        .. ": unknown option '%-%-no%-such%-option'[^\n]*\n$", r.stderr)
    end)
  end
end)
