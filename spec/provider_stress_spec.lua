-- The bundled provider under a steady load: 16 execs in flight, turn after
-- turn, through the real host (smol.sandbox) and the real provider. The
-- conformance kit sends 16 at once a single time; reaping children while
-- others are being started, hundreds of times over, is what broke once
-- (a pidfd watch left behind by a reaped child crashed the provider).
local sandbox = require "smol.sandbox"
local task = require "smol.task"
local core = require "smol.core"

local WIDTH, PER_TASK = 16, 20

local function bwrap_works()
  local out = io.popen("bwrap --ro-bind / / true 2>&1; echo $?")
  local status = out:read("a"):match("(%d+)%s*$")
  out:close()
  return status == "0"
end

describe("the bundled provider under load", function()
  local handles
  before_each(function()
    sandbox.shutdown()   -- providers other spec files left to this busted process
    core.run_nowait()
    handles = core.open_handles()
  end)
  after_each(function()
    sandbox.shutdown()
    core.run_nowait()
    assert.equal(handles, core.open_handles(), "loop handles left open")
  end)

  local function run_load(profile)
    local sb = sandbox.open{profile = profile, workspace = ""}
    local fns = {}
    for w = 1, WIDTH do
      fns[w] = function()
        for i = 1, PER_TASK do
          local tag = ("%d.%d"):format(w, i)
          local r = sb:exec{"sh", "-c", 'printf "%s" "$1"; printf "%s" "$1" >&2', "sh", tag}
          assert.same({true, tag, tag}, {r.ok, r.stdout, r.stderr}, "exec " .. tag)
        end
        return true
      end
    end
    local results = task.all(fns)
    assert.equal(WIDTH, #results)
    -- and the provider still serves, alone
    assert.equal("still here", sb:exec{"echo", "-n", "still here"}.stdout)
    local pid = sb:connection().pid
    sb:close()
    return pid
  end

  it("runs 320 execs 16 at a time under local/default, every output its own", function()
    local pid = run_load("local/default")
    sandbox.shutdown()
    assert.is_nil(io.open("/proc/" .. pid .. "/stat"), "the provider is gone after shutdown")
  end)

  it("runs 320 execs 16 at a time under bwrap/default where bubblewrap works", function()
    if not bwrap_works() then
      pending("bubblewrap cannot run here")
      return
    end
    run_load("bwrap/default")
  end)
end)
