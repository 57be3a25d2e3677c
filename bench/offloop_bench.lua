--[[
Another session's latency while the provider removes a big tree; prints
figures, passes or fails nothing:

  smolwf bench/offloop_bench.lua [NFILES] [PROVIDER] [PROFILE]

Session A writes NFILES (default 100000) empty files in 100 directories,
then asks to `remove` them; meanwhile session B sends `describe` and
`exec {"true"}` one after the other until the remove is answered.
Prints B's idle figures, the remove's duration, and B's median and
worst latency while it ran. For a bwrap profile, then: A's sandbox
helper is stopped (SIGSTOP) and sent 8 STARTs of 100 KB, more than its
control socket holds, and B's describe and exec latency is printed
(SIGCONT after). PROVIDER defaults to the bundled
smolwf-provider (give an older build to compare; "" for the default), PROFILE to
local/default.
]]
local core = require "smol.core"
local wire = require "smol.provider.conformance.wire"
local json = wire.json

local nfiles = tonumber(arg[1] or "100000")
local provider = (arg[2] or "") ~= "" and arg[2] or core.bundled_provider()
local pname, name = (arg[3] or "local/default"):match("^(.-)/(.*)$")

local conn = assert(wire.start({provider, "serve"}, {}))

local function call(method, params)
  local req = conn:call(method, params, {timeout = 600})
  assert(req.result, method .. " failed: " .. json.encode(req.error or {lost = req.lost}))
  return req.result
end

local function open()
  return call("open", {metadata = {request_id = "r", sandbox_group_id = "g"},
                       profile = {provider = pname, name = name},
                       workspace_sync = {host_path = json.decode("null")}, cwd = json.decode("null")})
end

-- One describe and one exec of B: their latencies in ms.
local function probe(b)
  local t0 = core.now()
  call("describe", {})
  local t1 = core.now()
  assert(call("exec", {session = b, argv = {"true"}}).exit_code == 0)
  return (t1 - t0) * 1000, (core.now() - t1) * 1000
end

local lib = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua")
-- A remove short enough to see no probe prints 0 rather than failing.
local function ms_median(v) return #v > 0 and lib.median(v) or 0 end

local a, b = open(), open()
local per_dir = math.ceil(nfiles / 100)
local make = table.concat({"import os", "for d in range(100):", "  os.makedirs('tree/d%d' % d)",
                           "  for i in range(" .. per_dir .. "):", "    open('tree/d%d/f%d' % (d, i), 'w').close()"}, "\n")
assert(call("exec", {session = a, argv = {"python3", "-c", make}}).exit_code == 0)

local idle_d, idle_e = {}, {}
for _ = 1, 20 do
  local d, e = probe(b)
  idle_d[#idle_d + 1], idle_e[#idle_e + 1] = d, e
end

local busy_d, busy_e, worst_d, worst_e = {}, {}, 0, 0
local t0 = core.now()
local rm = conn:send("remove", {session = a, path = "tree"})
while not rm.done do
  local d, e = probe(b)
  busy_d[#busy_d + 1], busy_e[#busy_e + 1] = d, e
  worst_d, worst_e = math.max(worst_d, d), math.max(worst_e, e)
end
local took = core.now() - t0
assert(rm.result, "remove failed: " .. json.encode(rm.error or {lost = rm.lost}))

print(("files removed          %d"):format(per_dir * 100))
print(("remove took ms         %.0f"):format(took * 1000))
print(("idle describe ms       %.2f (median of %d)"):format(ms_median(idle_d), #idle_d))
print(("idle exec ms           %.2f"):format(ms_median(idle_e)))
print(("probes during remove   %d"):format(#busy_d))
print(("busy describe ms       %.2f median, %.0f worst"):format(ms_median(busy_d), worst_d))
print(("busy exec ms           %.2f median, %.0f worst"):format(ms_median(busy_e), worst_e))

-- The pid of A's sandbox helper: the child of the provider's only bwrap child opened first.
local function first_helper(bwrap_pid)
  local f = assert(io.open(("/proc/%d/task/%d/children"):format(bwrap_pid, bwrap_pid)))
  local pid = f:read("a"):match("%d+")
  f:close()
  return assert(pid, "bwrap has no child")
end

local function first_bwrap()
  local f = assert(io.open(("/proc/%d/task/%d/children"):format(conn.pid, conn.pid)))
  local kids = f:read("a")
  f:close()
  for pid in kids:gmatch("%d+") do
    local c = io.open("/proc/" .. pid .. "/comm")
    local comm = c and c:read("a") or ""
    if c then c:close() end
    if comm:match("^bwrap") then return tonumber(pid) end
  end
end

if pname == "bwrap" then
  -- a fresh pair, so the first bwrap child is the new A's
  call("close", a)
  call("close", b)
  a = open()
  local helper = first_helper(assert(first_bwrap(), "no bwrap child"))
  b = open()
  assert(os.execute("kill -STOP " .. helper))
  local big = string.rep("x", 100000)
  for _ = 1, 8 do conn:send("spawn", {session = a, argv = {"true", big}}) end
  local d, e = probe(b)
  print(("stopped helper describe ms %.2f"):format(d))
  print(("stopped helper exec ms %.2f"):format(e))
  os.execute("kill -CONT " .. helper)
end
call("shutdown", {})
conn:wait_exit(60)
