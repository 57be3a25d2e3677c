-- A pool of launchers: two providers reached with `ssh 127.0.0.1 ...`
-- through a real sshd started for the test (spec/fixtures/sshd.lua), as
-- a pool would reach other machines; a workflow spread over them. Skipped,
-- with the reason, where sshd cannot start.
local core = require "smol.core"
local fs = require "smol.fs"
local sandbox = require "smol.sandbox"
local wf = require "smol.workflow"
local testing = require "smol.testing"
local h = dofile("spec/fixtures/helpers.lua")
local sshd_fixture = dofile("spec/fixtures/sshd.lua")

describe("a pool of ssh launchers", function()
  local env, why, made = sshd_fixture.up("smolwf-pool-ssh")
  teardown(function() sshd_fixture.down(env or made) end)
  if not env then
    pending("skipped: " .. tostring(why))
    return
  end

  -- `ssh OPTIONS 127.0.0.1 smolwf-provider` (the pool appends `serve`).
  local function launcher(port, extra)
    local argv = {"ssh", "-T", table.unpack(sshd_fixture.options(env, port or env.sshd.port))}
    argv[#argv + 1] = "127.0.0.1"
    argv[#argv + 1] = core.bundled_provider()
    for k, v in pairs(extra or {}) do argv[k] = v end
    return argv
  end

  local function remote_providers()
    local n = 0
    for _ in pairs(sshd_fixture.provider_pids(tostring(env.sshd.proc.pid))) do n = n + 1 end
    return n
  end

  after_each(h.cleanup)

  it("serves sessions from providers that sshd started, placed over both", function()
    local pool = sandbox.pool{programs = {launcher(), launcher(nil, {node = "box2"})}}
    local p = pool:providers()
    assert.equal(sandbox.host{}:exec{"uname", "-n"}.stdout:gsub("\n$", ""), p[1].node)   -- asked over ssh
    assert.equal("box2", p[2].node)
    assert.equal(tonumber(sandbox.host{}:exec{"getconf", "_NPROCESSORS_ONLN"}.stdout), p[2].slots)
    assert.equal(2, remote_providers())
    local a, b = pool:open{profile = "local/default", workspace = ""}, pool:open{profile = "local/default", workspace = ""}
    assert.same({1, 2}, {pool:placement(a).provider, pool:placement(b).provider})
    a:write_file("x", "over ssh\n")
    require("smol.pool.files").move(a, {"x"}, b)
    assert.equal("over ssh\n", b:exec{"cat", "x"}.stdout)
    pool:close()
    assert.is_true(h.wait_until(function() return remote_providers() == 0 end), "a remote provider outlived the pool")
  end)

  it("runs a workflow over them: outputs and an uploaded workspace follow the steps", function()
    local dir = h.tempdir()
    fs.write_file(dir .. "/main.sh", "echo built from the host\n")
    local r = testing.run_workflow(wf.define{
      name = "over ssh",
      sandbox = {profile = "local/default", workspace = {path = dir, upload = true},
        pool = {programs = {launcher(), launcher()}, slots = 1}},
      steps = {
        {name = "build", outputs = {"out/app.sh"}, run = function(ctx)
          ctx:sh("mkdir -p out && cp main.sh out/app.sh")
        end},
        {name = "hold", needs = "build", run = function(ctx) ctx:sh("true") end},
        {name = "use", needs = "build", run = function(ctx) return ctx:sh("sh out/app.sh").stdout end},
      },
    }, {cache = false, report_dir = h.tempdir()})
    assert.equal("success", r.result)
    assert.equal(2, r.by_id.use.placement.provider)
    assert.equal("built from the host\n", r.by_id.use.value)
    assert.equal("build", r.by_id.use.moved_in[1].step)
    assert.is_true(h.wait_until(function() return remote_providers() == 0 end))
  end)

  it("names a launcher that cannot reach its machine, with what ssh said", function()
    local e = h.catch(sandbox.pool, {programs = {launcher(), launcher(1)}})
    assert.equal("provider_exited", e.code)
    assert.matches("^provider 2 %(ssh %-T .*%) did not start serving: .*its stderr ends: .*Connection refused",
      e.message)
    assert.is_true(h.wait_until(function() return remote_providers() == 0 end))
  end)
end)
