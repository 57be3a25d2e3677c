-- `smolwf test`: busted inside the host, options passed through, golden
-- updates, --record and --replay. Each case runs the real smolwf on a small
-- project made in a temp directory.
local core = require "smol.core"
local fs = require "smol.fs"
local sandbox = require "smol.sandbox"
local testing = require "smol.testing"

local function write(path, content)
  fs.mkdir_p(path:match("^(.*)/[^/]*$"))
  fs.write_file(path, content)
end

local read = fs.try_read_file

local PASSING = [[
describe("alpha", function()
  it("adds", function() assert.equal(2, 1 + 1) end)
end)
describe("beta", function()
  it("subtracts", function() assert.equal(0, 1 - 1) end)
end)
]]

local FAILING = [[
it("fails on purpose", function() assert.equal(3, 1 + 1) end)
]]

local GOLDEN = [[
local testing = require "smol.testing"
it("matches its golden file", function()
  testing.golden("greeting.txt", "hello, new world\n")
end)
]]

-- Runs a command in the sandbox and writes what it printed to $OUT.
local SCENARIO = [[
local testing = require "smol.testing"
describe("a scenario", function()
  local sb = testing.sandbox{profile = "local/default", workspace = os.getenv("WS")}
  it("runs a command", function()
    local r = sb:exec{"sh", "-c", "date +%s%N; cat seed.txt"}
    assert.exec_ok(r)
    local f = assert(io.open(os.getenv("OUT"), "w"))
    f:write(r.stdout)
    f:close()
  end)
end)
]]

describe("smolwf test", function()
  local dir
  before_each(function() dir = fs.temp_dir("smolwf-cli-spec") end)
  after_each(function() testing.remove_tree(dir) end)

  -- Runs `smolwf test ARGS...` in the project; returns the result and all it printed.
  local function run(args, env)
    local spec = {core.exe_path(), "test", env = env}
    for _, a in ipairs(args) do spec[#spec + 1] = a end
    local r = sandbox.host{cwd = dir}:exec(spec)
    return r, r.stdout .. r.stderr
  end

  it("runs spec/ by default and exits 0 when everything passes", function()
    write(dir .. "/spec/math_spec.lua", PASSING)
    local r, out = run({})
    assert.exec_ok(r)
    assert.matches("2 successes / 0 failures", out, 1, true)
  end)

  it("exits non-zero when a test fails, naming it", function()
    write(dir .. "/spec/bad_spec.lua", FAILING)
    local r, out = run({})
    assert.exit_code(1, r)
    assert.matches("fails on purpose", out, 1, true)
  end)

  it("passes busted's options through: output handler, filter, paths", function()
    write(dir .. "/checks/math_spec.lua", PASSING)
    local r, out = run({"-o", "TAP", "--filter=alpha", "checks"})
    assert.exec_ok(r)
    assert.matches("ok 1 - alpha adds", out, 1, true)
    assert.matches("1..1", out, 1, true)
    assert.not_matches("beta", out, 1, true)
    r, out = run({"-o", "junit", "--tags=none-such", "checks"})
    assert.exec_ok(r)
    assert.matches("<testsuites", out, 1, true)
    assert.matches("tests='0'", out, 1, true)
  end)

  it("--update-golden rewrites a golden file that differs", function()
    write(dir .. "/spec/golden/greeting.txt", "hello, old world\n")
    write(dir .. "/spec/golden_spec.lua", GOLDEN)
    local r, out = run({})
    assert.exit_code(1, r)
    assert.matches("-hello, old world\n+hello, new world", out, 1, true)
    r = run({"--update-golden"})
    assert.exec_ok(r)
    assert.same("hello, new world\n", read(dir .. "/spec/golden/greeting.txt"))
    assert.exec_ok((run({})))
  end)

  it("--record writes the provider traffic; --replay runs the specs from it", function()
    write(dir .. "/ws/seed.txt", "seed\n")
    write(dir .. "/spec/scenario_spec.lua", SCENARIO)
    local env = {WS = dir .. "/ws", OUT = dir .. "/first.txt"}
    assert.exec_ok((run({"--record", dir .. "/rec.jsonl"}, env)))
    local first = read(dir .. "/first.txt")
    assert.matches("^%d+\nseed\n$", first)
    assert.matches('"method\\":\\"exec\\"', read(dir .. "/rec.jsonl"), 1, true)

    env.OUT = dir .. "/second.txt"
    assert.exec_ok((run({"--replay=" .. dir .. "/rec.jsonl"}, env)))
    assert.same(first, read(dir .. "/second.txt"))   -- the clock did not run again
  end)

  it("--help prints its own options and where busted's are, and exits 0", function()
    local r = run({"--help"})
    assert.exit_code(0, r)
    assert.same("", r.stderr)
    assert.matches("^usage: smolwf test %[OPTIONS%] %[BUSTED OPTIONS%] %[PATHS%.%.%.%]\n", r.stdout)
    for _, option in ipairs{"--update-golden", "--record FILE", "--replay FILE", "--help-busted"} do
      assert.matches("\n  " .. option:gsub("%-", "%%-") .. " ", r.stdout)
    end
    assert.matches("PATHS are spec files or folders", r.stdout, 1, true)
    assert.matches("\nexit status: 0 every test passed, 1 a test failed", r.stdout)
    assert.not_matches("--exclude-pattern", r.stdout, 1, true)   -- busted's list is not mixed in
  end)

  it("--help-busted lists busted's options under a heading, and exits 0", function()
    local r = run({"--help-busted"})
    assert.exit_code(0, r)
    assert.same("", r.stderr)
    assert.matches("^busted's options, passed through by smolwf test", r.stdout)
    assert.matches("--exclude-pattern=PATTERN", r.stdout, 1, true)
    assert.matches("-o, --output=LIBRARY", r.stdout, 1, true)
    assert.not_matches("smolwf test: error", r.stdout, 1, true)   -- busted calls its help an error
    assert.not_matches("re-run with --help", r.stdout, 1, true)
  end)

  it("names a bad option in one line and exits 2 without running anything", function()
    write(dir .. "/spec/math_spec.lua", PASSING)
    local r = run({"--bogus"})
    assert.exit_code(2, r)
    assert.same("", r.stdout)
    assert.same("smolwf test: unknown option '--bogus' (see smolwf test --help)\n", r.stderr)
    r = run({"-o"})
    assert.exit_code(2, r)
    assert.same("smolwf test: option -o requires a value to be set (see smolwf test --help)\n", r.stderr)
  end)

  it("names a PATH that is not there and exits 2 without running anything", function()
    local r = run({"spec/missing_spec.lua"})
    assert.exit_code(2, r)
    assert.same("smolwf test: no such file or folder: spec/missing_spec.lua (see smolwf test --help)\n", r.stderr)
    r = run({})   -- no spec/ in the project
    assert.exit_code(2, r)
    assert.matches("no spec/ folder here: name the spec files or folders to run", r.stderr, 1, true)
  end)

  it("refuses a --replay file that cannot be read, with status 2", function()
    write(dir .. "/spec/math_spec.lua", PASSING)
    local r, out = run({"--replay", dir .. "/missing.jsonl"})
    assert.exit_code(2, r)
    assert.matches("cannot read recording", out, 1, true)
    r, out = run({"--record"})
    assert.exit_code(2, r)
    assert.matches("--record needs a FILE", out, 1, true)
  end)
end)
