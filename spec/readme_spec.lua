-- The README as a reader meets it: each topic in one section, and the
-- set-up commands of its quick start name what exists.
local fs = require "smol.fs"
local lfs = require "lfs"

local README = fs.read_file("README.md")

-- The commands of the sh blocks under "## Quick start", one per block.
local function quick_start_commands()
  local section = README:match("\n## Quick start[^\n]*\n(.-)\n## ")
  local commands = {}
  for block in section:gmatch("```sh\n(.-)\n```") do commands[#commands + 1] = block end
  return commands
end

describe("the README", function()
  it("has one section on pools of providers", function()
    local headings = {}
    for heading in README:gmatch("\n#+ ([^\n]*)") do
      if heading:lower():find("pool", 1, true) then headings[#headings + 1] = heading end
    end
    assert.are.same({"Past one machine: a pool of providers"}, headings)
  end)

  it("sets up with two commands whose scripts and files exist", function()
    local commands = quick_start_commands()
    assert.are.equal(2, #commands)
    for _, command in ipairs(commands) do
      assert.matches("^%.ci/deps && cmake %-S %. %-B build && cmake %-%-build build %-j2 && ", command)
      for path in command:gmatch("[%w%./_-]+%.lua") do
        assert.is_not_nil(lfs.attributes(path), command .. ": no " .. path)
      end
    end
    assert.truthy(lfs.attributes(".ci/deps", "permissions"):find("^rwx"), ".ci/deps is executable")
    assert.matches("ctest %-%-test%-dir build", commands[2])
  end)
end)
