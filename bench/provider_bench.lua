--[[
The provider benchmark, run by smolwf (bench/provider_bench.sh runs it):

  smolwf bench/provider_bench.lua PROVIDER SPAWN_LOOP [EXECS] [STREAM_BYTES] [PART]

PROVIDER is smolwf-provider, SPAWN_LOOP is smolwf-bench-spawn-loop
(bench/spawn_loop.c); smolwf-bench-exec-client (bench/exec_client.c) is
taken from SPAWN_LOOP's directory. Side by side in one run it prints:
  - the median cost of starting /bin/true with a plain posix_spawn +
    waitpid loop, and with a fresh `bwrap --unshare-all ...` per command;
  - the median round trip of `exec /bin/true` through the provider under
    local/default and bwrap/default (or only the profile named by
    $BENCH_PROFILES), and its ratio to the plain loop (see BATCH below),
    twice: from a minimal C client (exec_client.c), so that the two
    sides differ by the provider alone, which is what the provider's
    targets are about; and from smolwf's own client (sb:exec in Lua, what
    a workflow pays: the host's share, which bench/host_bench.sh tracks);
  - the floor under those ratios: what any exec through this design pays
    and the plain loop does not, before code of ours runs (the session's
    namespaces, two capture pipes, the relay hops; smolwf-bench-exec-floor,
    bench/exec_floor.c, also taken from SPAWN_LOOP's directory);
  - execs/s with 16 in flight, and the machine's CPU utilisation meanwhile;
  - MB/s of stdout payload streamed through events, and the provider's
    peak RSS (VmHWM) after streaming STREAM_BYTES (default 1 GiB);
  - MB/s of stdout payload through sb:exec with on_stdout, beside the
    command's pipe read with no provider between.
The other figures use the conformance kit's raw connection
(smol.provider.conformance.wire), which is simpler but costs more per call (two
timers per request): it does not bound them. PART is
"exec" (only the exec comparison), or "all" (the default).
bench/provider_bench.sh runs the exec comparison pinned to one CPU too:
there the plain loop and the provider both pay CPU cost and context
switches only, while unpinned a wake-up of the other, idle, vCPU (tens of
µs on this VM) costs the provider's two extra hops (client -> provider ->
client) far more than the work they carry.
]]
local core = require "smol.core"
local wire = require "smol.provider.conformance.wire"
local sandbox = require "smol.sandbox"
local lfs = require "lfs"
local lib = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua")
local median, middle_half = lib.median, lib.middle_half

local provider = assert(arg[1], "usage: provider_bench.lua PROVIDER SPAWN_LOOP [EXECS] [STREAM_BYTES]")
local spawn_loop = assert(arg[2], "usage: provider_bench.lua PROVIDER SPAWN_LOOP [EXECS] [STREAM_BYTES]")
local exec_client = (spawn_loop:match("^(.*/)") or "") .. "smolwf-bench-exec-client"
local exec_floor = (spawn_loop:match("^(.*/)") or "") .. "smolwf-bench-exec-floor"
local EXECS = math.tointeger(tonumber(arg[3] or "")) or 1000
local STREAM_BYTES = math.tointeger(tonumber(arg[4] or "")) or 1024 * 1024 * 1024
local PART = arg[5] or "all"
local null = wire.null

local function report(name, value, fmt, note)
  print(("%-44s " .. fmt .. "%s"):format(name, value, note and ("   " .. note) or ""))
end

local BWRAP_PER_COMMAND = {"bwrap", "--unshare-all", "--die-with-parent", "--new-session",
  "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
  "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
  "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}

local function open_session(conn, profile)
  local prov, name = profile:match("^(.-)/(.*)$")
  local req = conn:call("open", {metadata = {request_id = "bench", sandbox_group_id = "bench"},
    profile = {provider = prov, name = name}, workspace_sync = {host_path = null}, cwd = null})
  assert(req.result and req.result.id, "open " .. profile .. " failed: " ..
    require("smol.provider.conformance.expect").reply(req))
  return req.result
end

local function exec_params(session, argv)
  return {session = session, argv = argv, cwd = null, env = null, stdin_base64 = null}
end

-- Median ms of one exec round trip, one at a time.
local function sequential_ms(conn, session, n)
  local times = {}
  for i = 1, n do
    local t0 = core.now()
    local req = conn:call("exec", exec_params(session, {"/bin/true"}))
    assert(req.result and req.result.exit_code == 0, "exec /bin/true failed")
    times[i] = core.now() - t0
  end
  return median(times) * 1000
end

-- Median ms of a `describe` round trip: JSON both ways, no process.
local function protocol_ms(conn, n)
  local times = {}
  for i = 1, n do
    local t0 = core.now()
    assert(conn:call("describe", {}).result, "describe failed")
    times[i] = core.now() - t0
  end
  return median(times) * 1000
end

-- Busy and total jiffies of the whole machine (first line of /proc/stat).
local function cpu_jiffies()
  local f = assert(io.open("/proc/stat"))
  local line = f:read("l")
  f:close()
  local v = {}
  for n in line:gmatch("%d+") do v[#v + 1] = tonumber(n) end
  local total = 0
  for _, x in ipairs(v) do total = total + x end
  return total - v[4] - (v[5] or 0), total     -- idle and iowait are not busy
end

-- Keeps `width` execs in flight until n finished; execs/s and CPU busy share.
local function in_flight(conn, session, n, width)
  local sent, finished = 0, 0
  local function launch()
    sent = sent + 1
    local req = conn:send("exec", exec_params(session, {"/bin/true"}))
    return req
  end
  local live = {}
  local busy0, total0 = cpu_jiffies()
  local t0 = core.now()
  for i = 1, width do live[i] = launch() end
  while finished < n do
    core.run_once()
    for i, req in ipairs(live) do
      if req.done then
        finished = finished + 1
        live[i] = sent < n and launch() or {done = false}
      end
    end
  end
  local secs = core.now() - t0
  local busy1, total1 = cpu_jiffies()
  return n / secs, (busy1 - busy0) / math.max(1, total1 - total0)
end

local function payload_bytes(b64)
  if type(b64) ~= "string" then return 0 end
  -- only the last two characters can be padding (a pattern scan costs ms per line)
  local pad = b64:sub(-2) == "==" and 2 or (b64:sub(-1) == "=" and 1 or 0)
  return #b64 // 4 * 3 - pad
end

-- Streams `bytes` of zeros as stdout events; MB/s of payload.
local function stream(conn, session, bytes)
  local got = 0
  local params = exec_params(session, {"head", "-c", tostring(bytes), "/dev/zero"})
  params.max_output_bytes = 0
  local t0 = core.now()
  local req = conn:send("exec", params, {discard_events = true, on_event = function(ev)
    if ev.type == "stdout" then got = got + payload_bytes(ev.data_base64) end
  end})
  conn:wait(req, 600)
  local secs = core.now() - t0
  assert(got == bytes, ("streamed %d of %d bytes"):format(got, bytes))
  return bytes / secs / 1e6
end

--[[
The same stream as a workflow has it, through sb:exec{capture = false,
on_stdout = ...} (smol.sandbox over the bundled provider, every chunk a
Lua string), in rounds interleaved with the pipe alone: the command's
stdout read by smolwf straight from its pipe, no provider between, as
smol.core reads a pipe: at every wake-up, whatever it holds. A reference
for the moment's machine, not a ceiling: the provider lets a fast pipe
fill before reading it again (process.c, rest), so its reads are larger
than this reader's and the stream through it can be the faster of the
two. Returns the medians in MB/s of payload.
]]
local STREAM_ROUNDS = 5
local function sandbox_stream(profile, bytes)
  local argv = {"head", "-c", tostring(bytes), "/dev/zero"}
  local sb = sandbox.open{program = provider, profile = profile, workspace = ""}
  local through, alone = {}, {}
  for _ = 1, STREAM_ROUNDS do
    local got, t0 = 0, core.now()
    sb:exec{argv[1], argv[2], argv[3], argv[4], capture = false, on_stdout = function(c) got = got + #c end}
    through[#through + 1] = got / (core.now() - t0) / 1e6
    assert(got == bytes, ("streamed %d of %d bytes"):format(got, bytes))
    local done, seen = false, 0
    t0 = core.now()
    local proc = assert(core.spawn{file = argv[1], args = argv, stdout = "chunks",
      on_stdout = function(c) if c then seen = seen + #c else done = true end end})
    wire.wait_until(function() return done end, 600)
    alone[#alone + 1] = seen / (core.now() - t0) / 1e6
    proc:close()
  end
  sb:close()
  return median(through), median(alone)
end

local function vm_hwm_mib(pid)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return -1 end
  local kib = f:read("a"):match("VmHWM:%s*(%d+)")
  f:close()
  return tonumber(kib) / 1024
end

--[[
The same stream read by a byte-counting reader (chunks, no JSON decoding):
the provider's own rate, without the client's per-event cost. Base64 never
holds a '"', so the first `"result"` after the exec was sent ends it.
Returns MB/s of payload and the provider's VmHWM in MiB.
]]
local function raw_stream(profile, bytes)
  local tail, t0, t1 = "", nil, nil
  local proc = assert(core.spawn{file = provider, args = {provider, "serve"}, stdin = true,
    stdout = "chunks", on_stdout = function(chunk)
      if not chunk or t1 then return end
      -- The result line (< 512 bytes) ends the stream: a chunk of 512 or more
      -- holds it whole, so only a short chunk needs the bytes before it (no
      -- copy of every chunk into a new string).
      tail = #chunk >= 512 and chunk:sub(-512) or (tail .. chunk):sub(-512)
      if t0 and tail:find('"result"', 1, true) then t1 = core.now() end
    end})
  local prov, name = profile:match("^(.-)/(.*)$")
  proc:write(wire.json.encode({id = 1, method = "open", params = {metadata = {request_id = "b",
    sandbox_group_id = "b"}, profile = {provider = prov, name = name},
    workspace_sync = {host_path = null}, cwd = null}}) .. "\n")
  wire.wait_until(function() return tail:find("\n") ~= nil end, 10)
  local session = {id = tail:match('"id"%s*:%s*"([^"]+)"')}
  local params = exec_params(session, {"head", "-c", tostring(bytes), "/dev/zero"})
  params.max_output_bytes = 0
  tail, t0 = "", core.now()
  proc:write(wire.json.encode({id = 2, method = "exec", params = params}) .. "\n")
  wire.wait_until(function() return t1 ~= nil end, 600)
  local hwm = vm_hwm_mib(proc.pid)
  proc:close_stdin()
  wire.wait_until(function() return false end, 0.5)   -- end of input: it closes and exits
  proc:kill("KILL")
  proc:close()
  return t1 and bytes / (t1 - t0) / 1e6 or 0, hwm
end

--[[
The machine is shared and noisy: on this VM a start of /bin/true takes
either ~0.85 or ~1.25 ms, switching between the two every few seconds
(a large share of it is the dynamic loader's CPUID probes, which trap to the
hypervisor). So the plain loop and the provider are measured in
alternating rounds of BATCH starts each (the loop runs as
`spawn_loop --serve`, timing its own posix_spawn + waitpid as before);
each round gives the ratio of its two medians, and the figure is the
median of those ratios: both sides of a round see the same moment of the
machine, and a round split by a switch is an outlier the median ignores. (Before,
each round ran a fresh spawn_loop through sandbox.host: side by side, 12
rounds of 50 each way, that loop measured 1.53-1.78 ms where the served one
measured 1.29-1.38 ms, which flattered the provider's ratio.)
]]
local BATCH = 50

local batch_server, exec_ms = lib.batch_server, lib.exec_ms

--[[
The argv that runs spawn_loop with loop_args inside the namespaces a
bubblewrap session gives its commands (as bwrap_args.c builds them, without
the workspace): what a start costs there before any relay or protocol, for
the floor below.
]]
local function in_session_namespaces(loop_args)
  local args = {"bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
    "--die-with-parent", "--new-session", "--as-pid-1", "--hostname", "sandbox"}
  for _, dir in ipairs{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"} do
    local link = lfs.symlinkattributes(dir, "target")
    if link then table.move({"--symlink", link, dir}, 1, 3, #args + 1, args)
    elseif lfs.attributes(dir, "mode") then table.move({"--ro-bind", dir, dir}, 1, 3, #args + 1, args) end
  end
  local loop = spawn_loop:sub(1, 1) == "/" and spawn_loop or lfs.currentdir() .. "/" .. spawn_loop
  table.move({"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
    "--ro-bind", loop, loop, "--", loop}, 1, 11, #args + 1, args)
  return table.move(loop_args, 1, #loop_args, #args + 1, args)
end

--[[
Samples (ms) of the plain loop, of exec through the provider from the C
client and from sb:exec, in rounds of BATCH each, one after the other;
and each round's ratios of medians (C client / plain, sb:exec / plain).
For a bubblewrap profile the rounds also run the plain loop inside the
session's namespaces (ratios.ns).
]]
local function interleaved_ms(profile)
  local sb = sandbox.open{program = provider, profile = profile, workspace = ""}
  local plain, stop_plain = batch_server({spawn_loop, "--serve", "/bin/true"})
  local client, stop_client = batch_server({exec_client, provider, profile, "/bin/true"})
  local ns, stop_ns
  if profile:match("^bwrap/") then
    ns, stop_ns = batch_server(in_session_namespaces({"--serve", "/bin/true"}))
    ns(50, {})
  end
  exec_ms(sb, 50, {})   -- warm up
  plain(50, {})
  client(50, {})
  local t = {plain = {}, client = {}, lua = {}}
  local ratios = {client = {}, lua = {}, ns = ns and {}}
  for r = 1, math.max(20, EXECS // BATCH) do
    local p, c, v, n = {}, {}, {}, {}
    plain(BATCH, p)
    client(BATCH, c)
    exec_ms(sb, BATCH, v)
    if ns then ns(BATCH, n); ratios.ns[r] = median(n) / median(p) end
    table.move(p, 1, #p, #t.plain + 1, t.plain)
    table.move(c, 1, #c, #t.client + 1, t.client)
    table.move(v, 1, #v, #t.lua + 1, t.lua)
    ratios.client[r] = median(c) / median(p)
    ratios.lua[r] = median(v) / median(p)
  end
  if stop_ns then stop_ns() end
  stop_client()
  stop_plain()
  sb:close()
  sandbox.shutdown(provider)
  return t, ratios
end

-- Median ms of about n starts of argv by the plain loop alone, in rounds of BATCH.
local function plain_median_ms(n, argv)
  local run, stop = batch_server({spawn_loop, "--serve", table.unpack(argv)})
  local t = {}
  for _ = 1, math.max(1, n // BATCH) do run(BATCH, t) end
  stop()
  return median(t)
end

local function report_ratio(name, ratios, note)
  local low, high = middle_half(ratios)
  report(name, median(ratios), "%.3fx", ("(median of %d rounds' ratios, middle half %.2f-%.2fx%s)"):format(#ratios,
    low, high, note))
end

-- The medians smolwf-bench-exec-floor prints (bench/exec_floor.c): {pipes_us = , hop_us = }.
local function floor_parts()
  local out = assert(io.popen(exec_floor))
  local parts = {}
  for key, us in out:read("a"):gmatch("(%S+) (%S+)") do parts[key] = tonumber(us) end
  assert(out:close() and parts.pipes_us and parts.hop_us, exec_floor .. " failed")
  return parts
end

--[[
What an exec through the provider pays before any code of ours runs, as a
ratio to the plain loop: the namespaces' own cost (the plain loop inside
them, bubblewrap sessions only), the two capture pipes, and one relay hop
per process between the client and the command's parent (the provider;
for a bubblewrap session also its helper).
]]
local function report_floor(profile, plain_ms, ratios)
  local parts = floor_parts()
  local hops = ratios.ns and 2 or 1
  local ns = 1
  if ratios.ns then
    ns = median(ratios.ns)
    report_ratio("  the plain loop in the session's namespaces", ratios.ns, "; no relay, no protocol")
  end
  local floor = ns + (parts.pipes_us + hops * parts.hop_us) / (plain_ms * 1000)
  report("  floor, " .. profile, floor, "%.3fx", ("(namespaces %.3fx + capture pipes %.1f µs + %d relay hop%s of %.1f µs)")
    :format(ns, parts.pipes_us, hops, hops > 1 and "s" or "", parts.hop_us))
end

local function bench_profile(profile)
  local t, ratios = interleaved_ms(profile)
  local target = profile:match("^local") and 1.10 or 1.25
  report("plain posix_spawn + waitpid of /bin/true", median(t.plain), "%.3f ms",
    ("(median of %d; rounds of %d next to the lines below)"):format(#t.plain, BATCH))
  report("exec /bin/true via provider, " .. profile, median(t.client), "%.3f ms",
    "(from a C client, exec_client.c)")
  report_ratio("  ratio, " .. profile, ratios.client, ("; target <= %.2fx"):format(target))
  report("  the same from smolwf's sb:exec", median(t.lua), "%.3f ms", "(the Lua client: what a workflow pays)")
  report_ratio("  its ratio", ratios.lua, "; the host's share: bench/host_bench.sh")
  report_floor(profile, median(t.plain), ratios)
  if PART == "exec" then return end
  local conn = assert(wire.start({provider, "serve"}))
  local session = open_session(conn, profile)
  report("  exec /bin/true, the kit's raw client", sequential_ms(conn, session, EXECS // 2), "%.3f ms",
    "(smol.provider.conformance.wire: same provider, a costlier client)")
  report("  request round trip without a process", protocol_ms(conn, EXECS), "%.3f ms",
    "(describe: the protocol's share of the line above)")
  local rate, busy = in_flight(conn, session, EXECS, 16)
  report("  16 in flight, " .. profile, rate, "%.0f execs/s",
    ("(CPU busy %.0f%% of 2 cores; sequential %.0f execs/s)"):format(busy * 100, 1000 / median(t.lua)))
  local mbs = stream(conn, session, 256 * 1024 * 1024)
  report("  stdout payload, Lua JSON client, " .. profile, mbs, "%.0f MB/s",
    "(every event decoded by lua-cjson)")
  conn:call("close", session)
  conn:stop()
  local raw, hwm = raw_stream(profile, STREAM_BYTES)
  report("  stdout payload, byte-counting reader, " .. profile, raw, "%.0f MB/s", "(target >= 500)")
  report(("  provider peak RSS streaming %d MiB, %s"):format(STREAM_BYTES >> 20, profile),
    hwm, "%.1f MiB", "(VmHWM of the provider; target < 64 MiB)")
  local through, alone = sandbox_stream(profile, 256 * 1024 * 1024)
  report("  stdout payload, sb:exec{capture = false, on_stdout}, " .. profile, through, "%.0f MB/s",
    ("(median of %d rounds of 256 MiB; target >= 1000; the pipe alone %.0f MB/s)"):format(STREAM_ROUNDS, alone))
end

local load = assert(io.open("/proc/loadavg")):read("l")
print("load average at start: " .. load:match("^(%S+ %S+ %S+)") .. " (2 cores; figures are noisy above ~1)")
if PART ~= "exec" then
  local plain_ms = plain_median_ms(EXECS, {"/bin/true"})
  local bwrap_ms = plain_median_ms(math.max(50, EXECS // 5), BWRAP_PER_COMMAND)
  report("fresh bwrap --unshare-all per command", bwrap_ms, "%.3f ms",
    ("(%.2fx the plain loop's %.3f ms)"):format(bwrap_ms / plain_ms, plain_ms))
end
for _, profile in ipairs(os.getenv("BENCH_PROFILES") and {os.getenv("BENCH_PROFILES")} or {"local/default", "bwrap/default"}) do
  local ok, err = pcall(bench_profile, profile)
  if not ok then report(profile, "failed: " .. tostring(err), "%s") end
end
