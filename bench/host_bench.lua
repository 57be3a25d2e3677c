--[[
The host benchmark, run by smolwf (bench/host_bench.sh runs it):
  smolwf bench/host_bench.lua PROVIDER [PINGPONG_MEDIAN_US] [STREAM_BYTES]
PROVIDER is smolwf-bench-provider (bench/bench_provider.c). Prints:
round trips/s sequential and with 64 in flight, the median µs of a
sequential round trip (and its ratio to the bare C ping-pong), the host's
own CPU time per round trip both ways (os.clock), MB/s of
stdout payload through events, and the host's peak RSS (VmHWM) after
streaming STREAM_BYTES (default 1 GiB) through on_stdout with capture off.
]]
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local task = require "smol.task"

local provider = assert(arg[1], "usage: host_bench.lua PROVIDER [PINGPONG_MEDIAN_US] [STREAM_BYTES]")
local pingpong_us = tonumber(arg[2])
local stream_bytes = math.tointeger(tonumber(arg[3] or "")) or 1024 * 1024 * 1024

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
  local conn, params = sb._conn, sb:params_json({argv = {"true"}})
  local cpu0 = os.clock()
  for i = 1, n do
    local t0 = core.now()
    if raw then conn:request("exec", params) else sb:exec{"true"} end
    times[i] = core.now() - t0
  end
  local cpu_us = (os.clock() - cpu0) / n * 1e6
  table.sort(times)
  local total = 0
  for _, t in ipairs(times) do total = total + t end
  return n / total, times[n // 2 + 1] * 1e6, cpu_us
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
local rps, median_us, seq_cpu_us = sequential(20000)
report("sequential round trips/s", rps, "%.0f")
report("sequential round trip, median", median_us, "%.1f us",
  pingpong_us and ("(%.2fx the bare C ping-pong's %.1f us; target <= 2x)"):format(median_us / pingpong_us, pingpong_us))
local _, raw_us = sequential(20000, true)
report("  of which smol.jsonl alone, median", raw_us, "%.1f us", "(the same request without the sandbox layer)")
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
