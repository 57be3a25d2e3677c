-- testing.fake_provider: canned provider behaviours, to force faults a real
-- provider cannot be made to do on demand, and see how the client and the
-- workflow engine cope.
local lfs = require "lfs"
local fs = require "smol.fs"
local task = require "smol.task"
local sandbox = require "smol.sandbox"
local testing = require "smol.testing"
local wf = require "smol.workflow"

local EXEC_OK = {exit_code = 0, stdout = "done\n", stderr = ""}

local function open_fake(spec)
  local fp = testing.fake_provider(spec)
  local sb = sandbox.open{program = fp.program, workspace = "/tmp"}
  finally(function()
    pcall(sb.close, sb)
    sandbox.shutdown(fp.program)
    fp:cleanup()
  end)
  return sb, fp
end

describe("testing.fake_provider", function()
  it("answers with canned events and results", function()
    local sb = open_fake{
      capabilities = {exec = true, signal = true},
      exec = {events = {{type = "started", process_id = "p9"}, {type = "stdout", data = "\0\1\255"},
                        {type = "exited", exit_code = 0}}, result = EXEC_OK},
    }
    assert.is_true(sb.capabilities.signal)
    local chunks = {}
    local r = sb:exec{"anything", on_stdout = function(c) chunks[#chunks + 1] = c end}
    assert.same({"\0\1\255"}, chunks)
    assert.same("done\n", r.stdout)
    assert.same("p9", r.process_id)
  end)

  it("crashes mid-exec: the output so far arrives, then provider_exited with the status", function()
    local sb, fp = open_fake{
      exec = {events = {{type = "started"}, {type = "stdout", data = "partial"}}, crash = 3},
    }
    local seen = {}
    local ok, err = pcall(sb.exec, sb, {"build", on_stdout = function(c) seen[#seen + 1] = c end})
    assert.is_false(ok)
    assert.same("provider_exited", err.code)
    assert.matches("exited with status 3", tostring(err), 1, true)
    assert.same({"partial"}, seen)
    -- the next open starts a fresh provider
    local again = sandbox.open{program = fp.program, workspace = "/tmp"}
    assert.same("fake_1", again.id)
    again:close()
  end)

  it("replies slowly without blocking other requests", function()
    local sb = open_fake{
      write_file = {delay = 0.5},
      read_file = {result = {content = "fast"}},
    }
    local order = {}
    task.all{
      function() sb:write_file("slow.txt", "x"); order[#order + 1] = "write" end,
      function() order[#order + 1] = sb:read_file("fast.txt") end,
    }
    assert.same({"fast", "write"}, order)
  end)

  it("sends an unknown event type, which the client refuses naming it", function()
    local sb = open_fake{exec = {events = {{type = "teleported"}}, result = EXEC_OK}}
    local ok, err = pcall(sb.exec, sb, {"x"})
    assert.is_false(ok)
    assert.same("protocol", err.code)
    assert.matches("unknown sandbox exec event type `teleported`", tostring(err), 1, true)
  end)

  it("answers errors, as a code or a table", function()
    local sb = open_fake{
      read_file = {error = {code = "not_found", message = "no such file `a`"}},
      remove = {error = "io_error"},
    }
    local ok, err = pcall(sb.read_file, sb, "a")
    assert.is_false(ok)
    assert.same("not_found", err.code)
    assert.matches("no such file `a`", tostring(err), 1, true)
    ok, err = pcall(sb.remove, sb, "b")
    assert.same("io_error", err.code)
  end)

  it("plays `calls` in order, the last one repeating", function()
    local sb = open_fake{read_file = {calls = {{error = "io_error"}, {result = {content = "ok"}}}}}
    assert.has_error(function() sb:read_file("x") end)
    assert.same("ok", sb:read_file("x"))
    assert.same("ok", sb:read_file("x"))
  end)

  it("runs functions in the provider, with upvalues copied and modules required again", function()
    local greeting = {text = "hello"}
    local core = require "smol.core"
    local sb = open_fake{
      exec = function(params, req)
        req:event{type = "stdout", data = greeting.text}
        return {exit_code = 7, stdout = greeting.text .. " " .. params.argv[1],
                stderr = core.b64encode("pid-free")}
      end,
    }
    local r = sb:exec{"world"}
    assert.same("hello world", r.stdout)
    assert.same("cGlkLWZyZWU=", r.stderr)
    assert.same(7, r.exit_code)
  end)

  it("hangs until the request is cancelled", function()
    local sb = open_fake{exec = {hang = true}}
    local t = task.spawn(function() return sb:exec{"forever"} end)
    task.spawn(function() t:cancel("enough") end)
    local ok, err = pcall(t.join, t)
    assert.is_false(ok)
    assert.same("cancelled", err.code)
  end)

  it("refuses behaviours it does not understand, naming them", function()
    local ok, err = pcall(testing.fake_provider, {exec = {reslut = {}}})
    assert.is_false(ok)
    assert.matches("`exec` has an unknown field `reslut`", err, 1, true)
    ok, err = pcall(testing.fake_provider, {exec = 42})
    assert.matches("`exec` must be a function or a table, got number", err, 1, true)
    local co = coroutine.create(function() end)
    ok, err = pcall(testing.fake_provider, {exec = function() return co end})
    assert.is_false(ok)
    assert.matches("upvalue co", err, 1, true)
  end)

  it("removes its files on cleanup", function()
    local fp = testing.fake_provider{}
    assert.truthy(lfs.attributes(fp.script))
    fp:cleanup()
    assert.is_nil(lfs.attributes(fp.script))
    assert.is_nil(lfs.attributes(fp.dir))
  end)
end)

describe("a workflow on a provider that crashes mid-exec", function()
  it("fails the step with provider_exited and skips its dependents", function()
    local fp = testing.fake_provider{
      exec = {events = {{type = "started"}, {type = "stdout", data = "compiling...\n"}}, crash = 9},
    }
    local report_dir = fs.temp_dir("smolwf-fake-run")
    finally(function()
      sandbox.shutdown(fp.program)
      fp:cleanup()
      testing.remove_tree(report_dir)
    end)
    local run = testing.run_workflow(wf.define{
      name = "crashy",
      sandbox = {program = fp.program, workspace = "/tmp"},
      steps = {
        {name = "build", run = function(ctx) ctx:sh("make") end},
        {name = "test", needs = {"build"}, run = function(ctx) ctx:sh("make test") end},
      },
    }, {report_dir = report_dir})
    assert.same("failure", run.result)
    assert.same("failed", run.by_id.build.status)
    assert.matches("exited with status 9", run.by_id.build.error, 1, true)
    assert.same("skipped", run.by_id.test.status)
    assert.matches("compiling...", testing.report_file(run, run.by_id.build.logs.stdout), 1, true)
  end)
end)
