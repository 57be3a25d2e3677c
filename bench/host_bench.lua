--[[
The host benchmark, run by smolwf (bench/host_bench.sh runs it):
  smolwf bench/host_bench.lua PROVIDER PINGPONG [STREAM_BYTES] [PART]
PROVIDER is smolwf-bench-provider (bench/bench_provider.c), PINGPONG
smolwf-bench-pingpong (bench/pingpong.c). Prints: the median µs of a
sequential round trip, side by side with the bare C ping-pong's, and their
ratio; round trips/s sequential and with 64 in flight; the host's own CPU
time per round trip (os.clock); MB/s of stdout payload through events; and
the host's peak RSS (VmHWM) after streaming STREAM_BYTES (default 1 GiB)
through on_stdout with capture off.

Side by side means interleaved: ROUNDS rounds, each running the ping-pong
then our round trips (through sb:exec, then through smol.jsonl alone) for
ROUND_TRIPS each. A round trip's cost on this kind of machine swings
several-fold with what else runs (an idle vCPU takes ~90 µs to wake, a busy
one a few), and interleaving gives both sides the same weather. Each figure
is the median of its per-round medians; the ratio is the median of the
per-round ratios. PART is "sequential" (only that comparison), "rest"
(all but it) or "all" (the default). bench/host_bench.sh runs the
comparison twice: pinned to one CPU, where the two processes of each side
take turns on one core and the figures are their CPU cost and context
switches, and as the scheduler places them, where a wake-up of the other,
idle, vCPU can cost more than all the rest.
]]
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local task = require "smol.task"
local median = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "lib.lua").median

local USAGE = "usage: host_bench.lua PROVIDER PINGPONG [STREAM_BYTES]"
local provider = assert(arg[1], USAGE)
local pingpong = assert(arg[2], USAGE)
local stream_bytes = math.tointeger(tonumber(arg[3] or "")) or 1024 * 1024 * 1024
local part = arg[4] or "all"
local ROUNDS, ROUND_TRIPS = 15, 2000

local function vm_hwm_kib()
  local f = assert(io.open("/proc/self/status"))
  local kib = f:read("a"):match("VmHWM:%s*(%d+)")
  f:close()
  return tonumber(kib)
end

local function report(name, value, fmt, note)
  print(("%-34s " .. fmt .. "%s"):format(name, value, note and ("   " .. note) or ""))
end

local sb = sandbox.open{program = provider, profile = "bench/none", workspace = ""}

-- Sequential: one exec at a time, each timed on its own (raw: straight
-- through the smol.jsonl connection, without the sandbox layer).
local function sequential(n, raw)
  local times = {}
  local conn, params = sb:connection(), sb:params_json({argv = {"true"}})
  local cpu0 = os.clock()
  for i = 1, n do
    local t0 = core.now()
    if raw then conn:request("exec", params) else sb:exec{"true"} end
    times[i] = core.now() - t0
  end
  local cpu_us = (os.clock() - cpu0) / n * 1e6
  local total = 0
  for _, t in ipairs(times) do total = total + t end
  return n / total, median(times) * 1e6, cpu_us
end

-- One run of the bare C ping-pong (on this machine, via sandbox.host): its
-- median µs per round trip.
local function pingpong_median_us(n)
  local r = sandbox.host{}:exec{pingpong, tostring(n)}
  assert(r.ok, "the ping-pong failed: exit code " .. tostring(r.exit_code) .. " " .. tostring(r.stderr))
  return assert(tonumber(r.stdout:match("pingpong_median_us ([%d.]+)")), "no median from the ping-pong")
end

-- ROUNDS interleaved rounds of the ping-pong, sb:exec and smol.jsonl alone.
local function side_by_side()
  local pp, ours, raw, ratios, raw_ratios = {}, {}, {}, {}, {}
  for r = 1, ROUNDS do
    pp[r] = pingpong_median_us(ROUND_TRIPS)
    ours[r] = select(2, sequential(ROUND_TRIPS))
    raw[r] = select(2, sequential(ROUND_TRIPS, true))
    ratios[r], raw_ratios[r] = ours[r] / pp[r], raw[r] / pp[r]
  end
  return median(pp), median(ours), median(raw), median(ratios), median(raw_ratios)
end

-- 64 tasks, each running its share of execs back to back.
local function in_flight(n, width)
  local fns = {}
  for w = 1, width do
    fns[w] = function() for _ = 1, n // width do sb:exec{"true"} end return true end
  end
  local t0, cpu0 = core.now(), os.clock()
  task.all(fns)
  local done = n // width * width
  return done / (core.now() - t0), (os.clock() - cpu0) / done * 1e6
end

-- Returns MB/s of wall time, and MB per second of the host's own CPU
-- time (os.clock: this process only), which a busy machine disturbs less.
local function stream(total, chunk)
  local got = 0
  local t0, cpu0 = core.now(), os.clock()
  sb:exec{"stream", tostring(total), tostring(chunk), capture = false,
          on_stdout = function(data) got = got + #data end}
  local secs, cpu = core.now() - t0, os.clock() - cpu0
  assert(got >= total, ("streamed %d of %d bytes"):format(got, total))
  return got / secs / 1e6, got / cpu / 1e6
end

sequential(2000)   -- warm up
if part ~= "rest" then
  local pp_us, median_us, raw_us, ratio, raw_ratio = side_by_side()
  report("bare C ping-pong, median", pp_us, "%.1f us",
    ("(%d interleaved rounds of %d round trips each)"):format(ROUNDS, ROUND_TRIPS))
  report("sequential round trip, median", median_us, "%.1f us",
    ("(%.2fx the ping-pong, median of the rounds' ratios; target <= 2x)"):format(ratio))
  report("  through smol.jsonl alone, median", raw_us, "%.1f us",
    ("(%.2fx; the same request without the sandbox layer)"):format(raw_ratio))
end
if part == "sequential" then
  sb:close()
  sandbox.shutdown()
  return
end
local rps, median_us, seq_cpu_us = sequential(20000)
report("sequential round trips/s", rps, "%.0f", ("(median %.1f us)"):format(median_us))
report("  host CPU per sequential round trip", seq_cpu_us, "%.1f us",
  "(os.clock: the host's own user+sys time per request)")
local flight_rps, flight_cpu_us = in_flight(64000, 64)
report("round trips/s, 64 in flight", flight_rps, "%.0f",
  ("(%.2fx the sequential median's rate)"):format(flight_rps * median_us / 1e6))
report("  host CPU per round trip in flight", flight_cpu_us, "%.1f us",
  "(the host's CPU is what bounds the rate in flight)")
local wall_mbs, cpu_mbs = stream(256 * 1024 * 1024, 65536)
report("stdout payload through events", wall_mbs, "%.0f MB/s", "(64 KiB chunks; target >= 500)")
report("  per second of the host's CPU", cpu_mbs, "%.0f MB", "(the host's share of the cost, less load-dependent)")
local mbs = stream(stream_bytes, 65536)
report(("peak RSS after streaming %d MiB"):format(stream_bytes >> 20), vm_hwm_kib() / 1024, "%.1f MiB",
  ("(VmHWM, capture off; %.0f MB/s; target < 64 MiB)"):format(mbs))
sb:close()
sandbox.shutdown()
