-- Extending the engine with your own Lua module (scripts/extend/lib/checks.lua):
--
--   smolwf run --path scripts/extend/lib scripts/extend.lua
--   SMOLWF_PATH=scripts/extend/lib smolwf run scripts/extend.lua
local wf = require "smol.workflow"
local checks = require "checks"

return wf.define {
  name = "extend",
  steps = {
    { name = "setup", run = function(ctx)
        ctx:create_dir_all("out")
        ctx:write_file("out/README", "generated\n")
      end },
    checks.each("greet", "who", { "world", "sandbox" }, "echo hello {who} > out/{who}.txt",
      { needs = "setup" }),
    checks.files_exist("verify", { "out/README", "out/world.txt", "out/sandbox.txt" },
      { needs = "greet" }),
  },
}
