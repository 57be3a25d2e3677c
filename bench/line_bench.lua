--[[
The host's peak memory for one maximal event line, run by smolwf against
the bench provider; prints figures, passes or fails nothing:

  smolwf bench/line_bench.lua BENCH_PROVIDER [LINE_MB] [quiet|callback|nocapture]

BENCH_PROVIDER is smolwf-bench-provider (bench/bench_provider.c); its
`stream TOTAL CHUNK` exec sends one stdout event of CHUNK bytes, a line of
about 4/3 CHUNK. LINE_MB (default 200) is that line's size. The way the
output is taken: quiet (captured, the default max_output_bytes), callback
(on_stdout counts it, captured too) or nocapture (on_stdout, capture =
false). Prints the host's peak RSS (VmHWM) before and after, and the
peak's ratio to the line. Run once per way: VmHWM is per process.
]]
local sandbox = require "smol.sandbox"

local USAGE = "usage: line_bench.lua BENCH_PROVIDER [LINE_MB] [quiet|callback|nocapture]"
local provider = assert(arg[1], USAGE)
local line_mb = tonumber(arg[2] or "200")
local how = arg[3] or "quiet"

local function vm_kib(field)
  local f = assert(io.open("/proc/self/status"))
  local kib = f:read("a"):match(field .. ":%s*(%d+)")
  f:close()
  return tonumber(kib)
end

local chunk = math.floor(line_mb * 1e6 * 3 / 4)
local line = math.floor((chunk + 2) / 3) * 4 + 60
local sb = sandbox.open{program = provider, profile = "bench/none", workspace = ""}
collectgarbage()
local before = vm_kib("VmHWM")
local got = 0
local spec = {"stream", tostring(chunk), tostring(chunk)}
if how ~= "quiet" then spec.on_stdout = function(data) got = got + #data end end
if how == "nocapture" then spec.capture = false end
local r = sb:exec(spec)
local after = vm_kib("VmHWM")
assert(how == "quiet" or got == chunk, ("on_stdout got %d of %d bytes"):format(got, chunk))
assert(how == "nocapture" or #r.stdout == math.min(chunk, sandbox.max_output_bytes), "captured too little")
print(("%-9s line %.0f MB: host VmHWM %.0f MiB before, %.0f MiB after: %.2fx the line"):format(how,
  line / 1e6, before / 1024, after / 1024, after * 1024 / line))
sb:close()
