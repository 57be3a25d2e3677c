-- The demo's C program built and tested by every compiler and level a
-- matrix names, with what a CI workflow uses every day: a step cache, a
-- matrix with include/exclude, env, a condition and a secret.
--
--   smolwf run scripts/compilers.lua                    # builds, tests
--   smolwf run scripts/compilers.lua                    # again: every build cached
--   smolwf run scripts/compilers.lua --explain check    # why each instance ran or not
--   UPLOAD_TOKEN=... smolwf run scripts/compilers.lua --param upload=yes
--
-- Each instance builds and tests in a session of its own (isolate = true):
-- the instances write the same object files, which in one shared session
-- would race. A cached instance does not run: its outputs (out/) are put
-- back into its session and its return value is reused.
local wf = require "smol.workflow"

local here = arg[0]:match("^(.*)/[^/]*$") or "."
local sources = here .. "/demo"

local function have(program)
  return os.execute("command -v " .. program .. " >/dev/null 2>&1") == true
end

local MATRIX = {
  cc = { "gcc" }, opt = { "-O0", "-O2" },
  -- clang, where it is installed, at -O2 only, with its sanitizer too.
  include = have("clang") and { { cc = "clang", opt = "-O2" }, { cc = "clang", opt = "-O2", san = "address" } } or nil,
}

return wf.define {
  name = "compilers",
  sandbox = { workspace = sources },
  env = { LC_ALL = "C" },
  -- optional: only the upload step needs it, and that step is off by default
  secrets = { UPLOAD_TOKEN = { env = "UPLOAD_TOKEN", optional = true } },
  steps = {
    { name = "check", matrix = MATRIX, isolate = true,
      inputs = { "*.c", "*.h", "Makefile" }, outputs = { "out" },
      run = function(ctx)
        local m = ctx.matrix
        local flags = m.opt .. " -Wall -Wextra -Werror" .. (m.san and (" -fsanitize=" .. m.san) or "")
        ctx:sh(("make clean all CC=%s CFLAGS='%s'"):format(m.cc, flags))
        ctx:sh("./test_calc arith && ./test_calc parse && mkdir -p out && cp calc test_calc out/")
        return { flags = flags, size = ctx:stat("out/calc").size }
      end },
    { name = "upload", needs = "check",
      when = function(ctx)
        if ctx.params.upload ~= "yes" then return false, "upload is off (--param upload=yes)" end
        return ctx.secrets.UPLOAD_TOKEN ~= nil, "UPLOAD_TOKEN is not set"
      end,
      run = function(ctx)
        -- The token reaches the command as $UPLOAD_TOKEN and is masked in every log.
        ctx:sh('test -n "$UPLOAD_TOKEN" && echo "would upload with token $UPLOAD_TOKEN"')
      end },
  },
}
