--[[
Host memory and time of exec with output capture on (the default), run by
smolwf against the bundled provider; prints figures, passes or fails nothing:

  smolwf bench/capture_bench.lua [BYTES] [capture|nocapture]

The command writes BYTES (default 300 000 000) of 57-byte lines to stdout;
the host keeps the captured copy (capped at 64 MiB per stream, the default
max_output_bytes). Prints the wall time, the host's peak RSS (VmHWM) and
what the result holds. Run it once per build to compare (VmHWM is per
process), e.g. before/after a change to smol.sandbox.
]]
local sandbox = require "smol.sandbox"
local core = require "smol.core"

local bytes = math.tointeger(tonumber(arg[1] or "")) or 300000000
local capture = arg[2] ~= "nocapture"

local function vm_hwm_mib()
  local f = assert(io.open("/proc/self/status"))
  local kib = f:read("a"):match("VmHWM:%s*(%d+)")
  f:close()
  return tonumber(kib) / 1024
end

local ws = assert(core.mkdtemp("/tmp/smolwf-capture-bench-XXXXXX"))
local sb = sandbox.open{profile = "local/default", workspace = ws}
local streamed = 0
local t0 = core.now()
local r = sb:exec{"sh", "-c", ("yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c %d"):format(bytes),
                  capture = capture, on_stdout = function(c) streamed = streamed + #c end}
local secs = core.now() - t0
print(("%-9s %d MB: %.2f s, peak RSS (VmHWM) %.1f MiB; streamed %d, r.stdout %s bytes, truncated %s")
  :format(capture and "capture" or "nocapture", bytes // 1000000, secs, vm_hwm_mib(), streamed,
          r.stdout and #r.stdout or "nil", tostring(r.stdout_truncated)))
sb:close()
sandbox.shutdown()
os.execute("rm -rf '" .. ws .. "'")
