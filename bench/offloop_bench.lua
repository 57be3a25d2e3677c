--[[
Another session's latency while the provider removes a big tree; prints
figures, passes or fails nothing:

  smolwf bench/offloop_bench.lua [NFILES] [PROVIDER] [PROFILE]

Session A writes NFILES (default 100000) empty files in 100 directories,
then asks to `remove` them; meanwhile session B sends `describe` and
`exec {"true"}` one after the other until the remove is answered.
Prints B's idle figures, the remove's duration, and B's median and
worst latency while it ran. PROVIDER defaults to the bundled
smolwf-provider (give an older build to compare), PROFILE to
local/default.
]]
local core = require "smol.core"
local wire = require "smol.provider.conformance.wire"
local json = wire.json

local nfiles = tonumber(arg[1] or "100000")
local provider = arg[2] or core.bundled_provider()
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

local function median(v)
  table.sort(v)
  return v[math.max(1, math.ceil(#v / 2))] or 0
end

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
print(("idle describe ms       %.2f (median of %d)"):format(median(idle_d), #idle_d))
print(("idle exec ms           %.2f"):format(median(idle_e)))
print(("probes during remove   %d"):format(#busy_d))
print(("busy describe ms       %.2f median, %.0f worst"):format(median(busy_d), worst_d))
print(("busy exec ms           %.2f median, %.0f worst"):format(median(busy_e), worst_e))
call("shutdown", {})
conn:wait_exit(60)
