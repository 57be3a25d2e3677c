-- How long `describe` takes while a capped session's files are measured
-- (prints figures; not a timed test).
--
--   smolwf bench/disk_bench.lua [FILES] [PROVIDER]   (default 200000 files, the bundled provider)
--
-- A local session with a disk cap far above what it uses makes FILES empty
-- files, then keeps a command running, so its files are measured again
-- and again; meanwhile 100 describes go one after another, 20 ms apart.
-- Prints their median and worst round trip.
-- Target: describe answers in about the time it takes on an idle provider,
-- whatever FILES is.
local core = require "smol.core"
local fs = require "smol.fs"
local cjson = require "cjson"
local wire = require "smol.provider.conformance.wire"

local FILES = tonumber(arg[1]) or 200000
local PROVIDER = arg[2] or core.bundled_provider()

local dir = fs.temp_dir("smolwf-disk-bench")
local profiles = dir .. "/profiles.json"
fs.write_file(profiles, cjson.encode{profiles = {{name = "local/capped", limits = {disk_bytes = 1e12}}}})
local conn = assert(wire.start({PROVIDER, "serve", "--profiles", profiles}))

local function call(method, params, timeout)
  local req = conn:call(method, params, {timeout = timeout or 600})
  assert(req.result, method .. ": " .. cjson.encode(req.error or {lost = req.lost}))
  return req.result
end

local s = call("open", {metadata = {request_id = "r", sandbox_group_id = "g"},
                        profile = {provider = "local", name = "capped"},
                        workspace_sync = {host_path = cjson.null}, cwd = cjson.null})
local function exec(script)
  return call("exec", {session = s, argv = {"sh", "-c", script}})
end

exec(("mkdir t && cd t && seq %d | xargs touch"):format(FILES))
call("spawn", {session = s, argv = {"sleep", "3600"}})

local times = {}
for i = 1, 100 do
  local t = core.now()
  call("describe", {})
  times[i] = (core.now() - t) * 1000
  wire.sleep(0.02)
end
table.sort(times)
print(("%d files: describe median %.2f ms, worst %.2f ms (100 calls while the session's files are measured)")
  :format(FILES, times[50], times[100]))

call("close", s)
conn:stop()
os.execute("rm -rf '" .. dir .. "'")
