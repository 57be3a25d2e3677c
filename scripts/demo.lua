-- The README's demo: build a small C program and test it inside a sandbox.
--
--   smolwf run scripts/demo.lua
--
-- The sources in scripts/demo/ are copied into the session's workspace when
-- the session opens; everything built stays in the sandbox (your files are
-- never changed). The binary comes back as an artifact in the report dir.
local wf = require "smol.workflow"

local here = arg[0]:match("^(.*)/[^/]*$") or "."

return wf.define {
  name = "demo",
  sandbox = { workspace = here .. "/demo" },
  steps = {
    { name = "toolchain", run = function(ctx)
        local r = ctx:sh("cc --version | head -n 1; make --version | head -n 1")
        ctx.log("using", (r.stdout:gsub("\n$", ""):gsub("\n", "; ")))
      end },
    { name = "build", needs = "toolchain", timeout = 120, run = function(ctx)
        ctx:sh("make -j2")
        return { binary = "calc", tests = "test_calc" }
      end },
    { name = "test", needs = "build", matrix = { suite = { "arith", "parse" } },
      run = function(ctx)
        ctx:sh("./" .. ctx.inputs.build.tests .. " " .. ctx.matrix.suite)
      end },
    { name = "smoke", needs = "build", run = function(ctx)
        local r = ctx:sh("./calc '6 * 7'")
        assert(r.stdout == "42\n", "calc '6 * 7' printed " .. r.stdout)
      end },
    { name = "package", needs = { "test", "smoke" }, run = function(ctx)
        ctx:sh("tar czf calc.tar.gz calc")
        ctx:save_artifact("calc.tar.gz")
      end },
  },
}
