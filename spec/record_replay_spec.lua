-- smol.recording.record / smol.recording.replay: record a real workflow run on the bundled
-- provider, replay it to the same report without running anything.
local cjson = require "cjson"
local fs = require "smol.fs"
local core = require "smol.core"
local lfs = require "lfs"
local jsonl = require "smol.jsonl"
local sandbox = require "smol.sandbox"
local record = require "smol.recording.record"
local replay = require "smol.recording.replay"
local testing = require "smol.testing"
local wf = require "smol.workflow"

local function read_lines(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = cjson.decode(line) end
  return out
end

-- The workflow: real commands whose output differs on every real run (the
-- clock in nanoseconds), a failing step, file operations, and a marker
-- file written on the host (local profile: no isolation) by a command.
local function define(ws, marker, greeting)
  return wf.define{
    name = "recorded",
    sandbox = {profile = "local/default", workspace = ws},
    steps = {
      {name = "hello", run = function(ctx)
        ctx:sh(("echo %s; date +%%s%%N; echo to-stderr >&2"):format(greeting))
      end},
      {name = "broken", continue_on_error = true, run = function(ctx) ctx:sh("echo no >&2; exit 3") end},
      {name = "files", needs = {"hello"}, run = function(ctx)
        ctx:create_dir_all("out")
        ctx:write_file("out/result.txt", "\0binary\255")
        assert(ctx:read_file("out/result.txt") == "\0binary\255")
        ctx:sh("touch " .. marker)
      end},
    },
  }
end

-- What a report must keep: per instance, status, exit code, error, logs.
local function outcome(run)
  local out = {result = run.result}
  for _, inst in ipairs(run.instances) do
    out[inst.id] = {status = inst.status, exit_code = inst.exit_code, error = inst.error,
      attempts = #inst.attempts,
      stdout = testing.report_file(run, inst.logs.stdout),
      stderr = testing.report_file(run, inst.logs.stderr)}
  end
  return out
end

-- Every provider program the host exchanged lines with while fn ran.
local function programs_started(fn)
  local seen, list = {}, {}
  local unobserve = jsonl.observe(function(_, info)
    if not seen[info.program] then seen[info.program] = true; list[#list + 1] = info.program end
  end)
  local ok, err = pcall(fn)
  unobserve()
  if not ok then error(err, 0) end
  return list
end

describe("record and replay of a workflow run", function()
  local dir, ws, marker, recording
  local runs = 0
  local function new_report_dir()
    runs = runs + 1
    return dir .. "/report-" .. runs
  end
  setup(function()
    dir = fs.temp_dir("smolwf-rr-spec")
    ws, marker, recording = dir .. "/ws", dir .. "/marker", dir .. "/run.jsonl"
    assert(lfs.mkdir(ws))
    sandbox.shutdown()    -- replay must start providers of its own
  end)
  teardown(function()
    sandbox.shutdown()
    testing.remove_tree(dir)
  end)

  local recorded_run, recorded   -- the run table, and its outcome read while its report exists
  it("records every line with timestamps and sessions", function()
    sandbox.shutdown()
    local rec = record.start(recording)
    recorded_run = testing.run_workflow(define(ws, marker, "hello"), {report_dir = new_report_dir()})
    rec:stop()
    recorded = outcome(recorded_run)
    assert.truthy(lfs.attributes(marker))
    os.remove(marker)
    assert.same("success", recorded_run.result)   -- `broken` may fail (continue_on_error)
    assert.same("failed", recorded_run.by_id.broken.status)
    assert.same("success", recorded_run.by_id.files.status)

    local lines = read_lines(recording)
    assert.same({format = "smolwf-recording", version = 1}, {format = lines[1].format, version = lines[1].version})
    local last_seq, last_t, sessions, methods, outputs = 0, 0, {}, {}, 0
    for i = 2, #lines do
      local e = lines[i]
      assert.is_true(e.seq > last_seq and e.t >= last_t)
      last_seq, last_t = e.seq, e.t
      assert.is_string(e.program)
      if e.dir == "recv" then
        -- The provider sent output as frames (raw_output): recorded as the base64 lines they stand for.
        assert.is_nil(e.line:find('"data_bytes"', 1, true), e.line)
        local ev = cjson.decode(e.line).event
        if ev and ev.type == "stdout" then
          assert.is_string(ev.data_base64)
          outputs = outputs + 1
        end
      end
      if e.dir == "send" then
        local msg = cjson.decode(e.line)
        methods[msg.method] = true
        if msg.method == "exec" then
          -- The bundled provider announces session_by_id: the id alone names the session.
          assert.same({id = e.session}, msg.params.session)
          sessions[e.session] = true
        end
      end
    end
    assert.truthy(methods.open and methods.exec and methods.write_file and methods.read_file and methods.close)
    assert.is_true(outputs > 0)
    assert.same(1, #(function() local t = {} for s in pairs(sessions) do t[#t + 1] = s end return t end)())
  end)

  it("replays it to the same report, without running any command", function()
    local handle = replay.install(recording)
    local replayed
    local programs = programs_started(function()
      replayed = testing.run_workflow(define(ws, marker, "hello"), {report_dir = new_report_dir()})
    end)
    handle:uninstall()
    sandbox.shutdown()
    assert.same(recorded, outcome(replayed))
    assert.matches("^hello\n%d+\n$", outcome(replayed).hello.stdout)
    assert.is_nil(lfs.attributes(marker), "a command ran: the marker was written")
    assert.is_true(#programs >= 1)
    for _, program in ipairs(programs) do   -- the replay provider only
      assert.matches(" provider .*/smol/recording/replay_provider%.lua .*run%.jsonl", program)
    end
  end)

  it("fails a request the recording does not have, showing both side by side", function()
    local handle = replay.install(recording)
    local run = testing.run_workflow(define(ws, marker, "goodbye"), {report_dir = new_report_dir()})
    handle:uninstall()
    sandbox.shutdown()
    local hello = run.by_id.hello
    assert.same("failed", hello.status)
    assert.matches("replay: no request in the recording `" .. recording
      .. "` matches this `exec` request", hello.error, 1, true)
    assert.matches("closest unused recorded request", hello.error, 1, true)
    local row = hello.error:match("\n(  ! params%.argv%[3%][^\n]*)")
    assert.is_string(row, hello.error)
    assert.matches('"echo hello; date', row, 1, true)
    assert.matches('"echo goodbye; date', row, 1, true)
    assert.is_nil(lfs.attributes(marker))
  end)
end)

describe("smolwf run --replay", function()
  it("runs a recorded workflow with no PATH: a replay starts no program by name and writes no wrapper", function()
    local dir = assert(core.mkdtemp("/tmp/smolwf-rr-path-XXXXXX"))
    finally(function() testing.remove_tree(dir) end)
    local file = assert(io.open(dir .. "/wf.lua", "w"))
    file:write(([[
local wf = require "smol.workflow"
return wf.define{name = "nopath", sandbox = {profile = "local/default", workspace = %q},
  steps = {{name = "hello", run = function(ctx)
    ctx:sh("echo hello")
    ctx:write_file("f", "x")
    assert(ctx:read_file("f") == "x")
  end}}}
]]):format(dir))
    file:close()
    local smolwf = core.exe_path()
    local rec, report = dir .. "/rec.jsonl", dir .. "/report"
    local ok, how, code = os.execute(("cd %q && %q run --no-progress --report-dir %q --record %q wf.lua >/dev/null 2>&1")
      :format(dir, smolwf, report .. "1", rec))
    assert.is_true(ok, ("recording run failed: %s %s"):format(how, code))
    local out = dir .. "/out"
    ok, how, code = os.execute(("cd %q && env PATH=/nonexistent %q run --no-progress --report-dir %q --replay %q wf.lua >%q 2>&1")
      :format(dir, smolwf, report .. "2", rec, out))
    assert.is_true(ok, ("replay without PATH failed (%s %s): %s"):format(how, code, io.open(out):read("a")))
  end)
end)

describe("a recording of a run with secrets", function()
  local SECRET = "s3cr3t-Value-42"

  -- Whether text holds the secret in any form a masker looks for.
  local function leaks(text)
    local mask = require "smol.workflow.mask"
    return text:find(SECRET, 1, true) ~= nil or mask.new{SECRET}:text(text) ~= text
  end

  it("holds none of their values, and still replays", function()
    local dir = fs.temp_dir("smolwf-rr-secret")
    local program
    finally(function()   -- the providers first: the replay's session is in dir
      sandbox.shutdown()
      testing.remove_tree(dir)
    end)
    local file = dir .. "/session.jsonl"
    local rec = record.start(file)
    rec:mask_with(require("smol.workflow.mask").new{SECRET})
    local sb = sandbox.open{profile = "local/default", workspace = dir}
    local r1 = sb:exec{"sh", "-c", "printf %s \"$TOKEN\" | wc -c; cat", env = {TOKEN = SECRET}, stdin = SECRET}
    sb:write_file("token", SECRET)
    sb:close()
    rec:stop()
    local text = assert(io.open(file)):read("a")
    assert.is_false(leaks(text), "the recording holds the secret")
    local masked = 0
    for _, e in ipairs(read_lines(file)) do masked = masked + (e.masked and 1 or 0) end
    assert.is_true(masked >= 3, "entries marked masked: " .. masked)
    assert.equal(#SECRET .. "\n" .. SECRET, r1.stdout)

    program = replay.program(file)
    local again = sandbox.open{program = program, profile = "local/default", workspace = dir}
    local r2 = again:exec{"sh", "-c", "printf %s \"$TOKEN\" | wc -c; cat", env = {TOKEN = SECRET}, stdin = SECRET}
    assert.equal(#SECRET .. "\n***", r2.stdout)   -- what the recording kept
    again:write_file("token", SECRET)
    again:close()
  end)

  it("made by smolwf run --record holds none of the workflow's secrets", function()
    local dir = assert(core.mkdtemp("/tmp/smolwf-rr-secret-XXXXXX"))
    finally(function() testing.remove_tree(dir) end)
    local file = assert(io.open(dir .. "/wf.lua", "w"))
    file:write(([[
local wf = require "smol.workflow"
return wf.define{name = "secret", sandbox = {profile = "local/default", workspace = %q},
  secrets = {TOKEN = {env = "SMOLWF_SPEC_TOKEN"}},
  steps = {{name = "use", run = function(ctx) ctx:sh("echo \"$TOKEN\" > %s/used; cat %s/used") end}}}
]]):format(dir, dir, dir))
    file:close()
    local rec = dir .. "/rec.jsonl"
    local ok, how, code = os.execute(("cd %q && SMOLWF_SPEC_TOKEN=%q %q run --no-progress --report-dir %q --record %q wf.lua >/dev/null 2>&1")
      :format(dir, SECRET, core.exe_path(), dir .. "/report", rec))
    assert.is_true(ok, ("the run failed: %s %s"):format(how, code))
    assert.equal(SECRET .. "\n", assert(io.open(dir .. "/used")):read("a"))   -- the command had it
    assert.is_false(leaks(assert(io.open(rec)):read("a")), "the recording holds the secret")
  end)
end)

describe("the replay provider on its own", function()
  local dir
  before_each(function() dir = fs.temp_dir("smolwf-rr-own") end)
  after_each(function() testing.remove_tree(dir) end)

  it("serves sandbox.open{program = replay.program(file)} from a recording", function()
    local file = dir .. "/session.jsonl"
    local rec = record.start(file)
    local sb = sandbox.open{profile = "local/default", workspace = dir}
    sb:write_file("a.bin", "\0\1\255")
    local r1 = sb:exec{"sh", "-c", "cat a.bin; echo; echo $$ >&2; exit 4"}
    local bytes = sb:read_file("a.bin")
    sb:close()
    rec:stop()

    local program = replay.program(file)
    local again = sandbox.open{program = program, profile = "local/default", workspace = dir}
    finally(function()
      sandbox.shutdown(program)
    end)
    assert.same(sb.id, again.id)
    again:write_file("a.bin", "\0\1\255")
    local r2 = again:exec{"sh", "-c", "cat a.bin; echo; echo $$ >&2; exit 4"}
    assert.same({r1.exit_code, r1.stdout, r1.stderr}, {r2.exit_code, r2.stdout, r2.stderr})
    assert.same(bytes, again:read_file("a.bin"))
    -- each recorded request is used once: a second identical read has no match
    local ok, err = pcall(again.read_file, again, "a.bin")
    assert.is_false(ok)
    assert.matches("matches this `read_file` request", tostring(err), 1, true)
    again:close()
  end)

  it("replays a provider's crash as that crash: its events, then the same exit status or signal", function()
    local h = dofile("spec/fixtures/helpers.lua")
    local FAULT = h.fixture("fault_provider.lua")
    local function run_crash(program, argv)
      local sb = sandbox.open{program = program, workspace = dir}
      local events = {}
      local err = h.catch(sb.exec, sb, {argv[1], argv[2], on_event = function(ev) events[#events + 1] = ev.type end})
      sb:close()   -- its provider is gone: nothing to send
      return err, events
    end
    for _, case in ipairs{{argv = {"crash", "5"}, says = "exited with status 5"},
                          {argv = {"die", "KILL"}, says = "was killed by signal KILL %(status 137%)"}} do
      local file = dir .. "/crash.jsonl"
      local rec = record.start(file)
      local recorded, recorded_events = run_crash(FAULT, case.argv)
      rec:stop()
      sandbox.shutdown(FAULT)
      local program = replay.program(file)
      local replayed, replayed_events = run_crash(program, case.argv)
      sandbox.shutdown(program)
      for _, e in ipairs{recorded, replayed} do
        assert.equal("provider_exited", e.code, tostring(e))
        assert.matches(case.says, e.message)
      end
      assert.same({recorded.exit_code, recorded.signal}, {replayed.exit_code, replayed.signal})
      assert.same({"started"}, recorded_events)
      assert.same(recorded_events, replayed_events)
    end
  end)

  it("refuses a file that is not a recording, naming it", function()
    local file = dir .. "/not.jsonl"
    local f = assert(io.open(file, "w"))
    f:write('{"hello": 1}\n')
    f:close()
    local ok, err = pcall(replay.install, file)
    assert.is_false(ok)
    assert.matches("is not a smolwf recording", tostring(err), 1, true)
    ok, err = pcall(replay.install, dir .. "/missing.jsonl")
    assert.matches("cannot read recording", tostring(err), 1, true)
  end)
end)
