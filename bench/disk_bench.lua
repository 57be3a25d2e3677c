-- What the disk cap costs and how far a session can pass it (prints
-- figures; not a timed test).
--
--   smolwf bench/disk_bench.lua [FILES] [PROVIDER]       (default 200000 files, the bundled provider)
--   smolwf bench/disk_bench.lua overshoot [PROVIDER]
--
-- FILES: a local session with a disk cap far above what it uses makes
-- FILES empty files, then keeps a command running, so its files are
-- measured again and again; meanwhile 100 describes go one after another,
-- 20 ms apart. Prints their median and worst round trip. Target: describe
-- answers in about the time it takes on an idle provider, whatever FILES is.
--
-- overshoot: a local session capped at 8 MB runs a writer of 200 files of
-- 1 MB each, as fast as it can, 5 times; prints what the session's files
-- took once the writer was killed (du), each time.
local core = require "smol.core"
local fs = require "smol.fs"
local cjson = require "cjson"
local wire = require "smol.provider.conformance.wire"

local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local OVERSHOOT = arg[1] == "overshoot"
local FILES = tonumber(arg[1]) or 200000
local PROVIDER = arg[2] or core.bundled_provider()
local CAP = OVERSHOOT and 8e6 or 1e12

local dir = fs.temp_dir("smolwf-disk-bench")
local profiles = dir .. "/profiles.json"
fs.write_file(profiles, cjson.encode{profiles = {{name = "local/capped", limits = {disk_bytes = CAP}}}})
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

local function describe_latency()
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
    :format(FILES, median(times), times[100]))
end

local WRITER = "mkdir d && cd d && n=0; while [ $n -lt 200 ]; do head -c 1000000 /dev/zero > f$n; n=$((n+1)); done; sleep 60"

local function overshoot()
  for round = 1, 5 do
    local r = conn:call("exec", {session = s, argv = {"sh", "-c", WRITER}}, {timeout = 120}).result
    local du = io.popen("du -sk '" .. s.cwd .. "'"):read("n")
    print(("round %d: writer %s, the session's files took %.1f MB (cap %.0f MB)")
      :format(round, r.signal or ("exit " .. r.exit_code), du * 1024 / 1e6, CAP / 1e6))
    call("remove", {session = s, path = "d"}, 60)
  end
end

if OVERSHOOT then overshoot() else describe_latency() end
call("close", s)
conn:stop()
os.execute("rm -rf '" .. dir .. "'")
