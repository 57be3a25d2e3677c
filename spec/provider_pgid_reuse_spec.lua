-- The local backend kills, at close, every process group its session ever
-- started. Pids are reused quickly (pid_max is often 32768), so a recorded
-- group number may belong to someone else's group by then: that group must
-- be left alone. A fresh pid namespace and ns_last_pid make the reuse
-- happen on demand (root only: writing ns_last_pid needs CAP_SYS_ADMIN).
local core = require "smol.core"
local h = dofile("spec/fixtures/helpers.lua")

local FIXTURE = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/pgid_reuse.lua"

local function run(argv)
  local out, done = {}, false
  local proc = assert(core.spawn{file = argv[1], args = argv, stdout = "chunks", stderr = "chunks",
    on_stdout = function(c) if c then out[#out + 1] = c end end,
    on_stderr = function(c) if c then out[#out + 1] = c end end,
    on_exit = function() done = true end})
  assert(h.wait_until(function() return done end, 60), "the fixture did not finish")
  proc:close()
  return table.concat(out)
end

local function can_unshare()
  if not os.execute("unshare --pid --fork --mount-proc true 2>/dev/null") then return false end
  local f = io.open("/proc/sys/kernel/ns_last_pid", "w")
  if f then f:close() end
  return f ~= nil
end

describe("the local backend at close", function()
  if not can_unshare() then
    pending("skipped: needs root and unshare to reuse a pid on demand")
    return
  end

  it("leaves alone a group that took over an ended command's group number", function()
    local out = run{"unshare", "--pid", "--fork", "--mount-proc", core.exe_path(), FIXTURE}
    assert.are.equal("reused\talive\n", out)
  end)
end)
