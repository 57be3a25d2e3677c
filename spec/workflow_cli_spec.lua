-- `smolwf run`: options, exit codes, plain scripts, Ctrl-C, the examples.
-- Each case runs the real smolwf binary as a child process.
local h = require "spec.workflow_helpers"
local task = require "smol.task"

local FIX = "spec/fixtures/workflows/"

local function run_cli(args, opts)
  return h.smolwf(args, opts)
end

local function with_report_dir(args)
  local dir = h.temp_dir()
  local out = { "run", "--no-progress", "--report-dir", dir }
  for _, a in ipairs(args) do out[#out + 1] = a end
  return out, dir
end

describe("smolwf run", function()
  after_each(h.cleanup)

  it("takes options anywhere before `--` and gives the script the rest", function()
    local cli = require "smol.cli.run"
    local o = cli.parse { "--jobs", "3", "--step=b", "wf.lua", "a", "--step", "c", "--param", "k=v=w",
      "--keep-going", "--json", "--no-progress", "--report-dir=out", "--path", "lib",
      "--list", "--dry-run", "b", "--", "--jobs", "x" }
    assert.are.equal(3, o.jobs)
    assert.are.same({ "b", "c" }, o.steps)
    assert.are.same({ k = "v=w" }, o.params)
    assert.are.same({ "lib" }, o.paths)
    assert.are.equal("out", o.report_dir)
    assert.is_true(o.keep_going and o.json and o.no_progress and o.list and o.dry_run)
    assert.are.equal("wf.lua", o.file)
    assert.are.same({ "a", "b", "--jobs", "x" }, o.script_args)
    assert.are.equal("-opt", cli.parse({ "--", "-opt" }).file)
    local ok, err = pcall(cli.parse, { "--param", "novalue", "f" })
    assert.is_false(ok)
    assert.matches("%-%-param needs KEY=VALUE, got 'novalue'", tostring(err))
    ok, err = pcall(cli.parse, { "f", "--step" })
    assert.matches("%-%-step needs a value", tostring(err))
    assert.are.equal("mermaid", cli.parse({ "--graph", "mermaid", "f" }).graph)
    assert.are.same({ "dot", "f" }, { cli.parse({ "--graph", "f" }).graph, cli.parse({ "--graph", "f" }).file })
  end)

  it("applies options given after FILE to the run (they used to become the script's arg)", function()
    local args, dir = with_report_dir { FIX .. "fail.lua", "--keep-going", "--jobs", "1" }
    local r = run_cli(args)
    assert.are.equal(1, r.code, r.stderr)
    local report = require("cjson").decode(h.read(dir .. "/report.json"))
    assert.are.equal(1, report.jobs)
    assert.matches("fail failure in .* 1 failed, 1 skipped", r.stdout)
  end)

  it("suggests the option meant for a misspelled one", function()
    local r = run_cli { "run", FIX .. "ok.lua", "--keepgoing" }
    assert.are.equal(2, r.code)
    assert.are.equal("smolwf run: unknown option '--keepgoing' (did you mean '--keep-going'?)\n", r.stderr)
    r = run_cli { "run", "--job=2", FIX .. "ok.lua" }
    assert.matches("unknown option '%-%-job=2' %(did you mean '%-%-jobs'%?%)", r.stderr)
    r = run_cli { "run", "--profile", "bogus", FIX .. "ok.lua" }
    assert.are.same({ 2, "smolwf run: --profile needs PROVIDER/NAME (e.g. bwrap/default), got 'bogus'\n" },
      { r.code, r.stderr })
    r = run_cli { "run", FIX .. "ok.lua", "-x" }
    assert.matches("unknown option '%-x' %(.*options for the script go after `%-%-`%)", r.stderr)
  end)

  it("says why FILE is a word that followed --graph or --resume when there is no such file", function()
    local r = run_cli { "run", "--graph", "svg", FIX .. "ok.lua" }
    assert.are.equal(2, r.code)
    assert.are.equal("smolwf run: cannot open svg: No such file or directory"
      .. " (`svg` follows --graph, which takes dot or mermaid)\n", r.stderr)
    r = run_cli { "run", "--resume", "/nonexistent/run", FIX .. "ok.lua" }
    assert.are.equal(2, r.code)
    assert.matches("cannot open /nonexistent/run: .* %(`/nonexistent/run` follows %-%-resume, which takes a run's"
      .. " report directory: one holding report.json%)\n$", r.stderr)
  end)

  it("prints its usage with --help", function()
    local r = run_cli { "run", "--help" }
    assert.are.equal(0, r.code)
    assert.matches("usage: smolwf run %[OPTIONS%] FILE", r.stdout)
    assert.matches("%-%-keep%-going", r.stdout)
  end)

  it("runs a plain script that returns no workflow, with its arguments", function()
    local r = run_cli { "run", FIX .. "plain.lua", "a", "b" }
    assert.are.equal(0, r.code)
    assert.are.equal("plain\ttrue\ta\tb\n", r.stdout)
  end)

  it("exits 0 when every step succeeds and passes --param", function()
    local args, dir = with_report_dir { "--param", "greeting=hi there", FIX .. "ok.lua" }
    local r = run_cli(args)
    assert.are.equal(0, r.code, r.stderr)
    assert.matches("greeting=hi there", r.stderr)
    assert.matches("ok success in .*\nreport: " .. dir:gsub("%p", "%%%0"), r.stdout)
  end)

  it("refuses a --param the workflow does not declare, naming it and what it meant", function()
    local args, dir = with_report_dir { "--param", "greting=hi", FIX .. "ok.lua" }
    local r = run_cli(args)
    assert.are.same({ 2, "", "smolwf run: --param greting: the workflow has no such parameter (did you mean 'greeting'?)\n" },
      { r.code, r.stdout, r.stderr })
    assert.is_nil(require("lfs").attributes(dir .. "/report.json"), "nothing ran")
    r = run_cli(with_report_dir { "--param", "zzz=1", FIX .. "ok.lua" })
    assert.are.same({ 2, "smolwf run: --param zzz: the workflow has no such parameter (its parameters: greeting)\n" },
      { r.code, r.stderr })
  end)

  it("exits 1 when a step fails", function()
    local args = with_report_dir { FIX .. "fail.lua" }
    local r = run_cli(args)
    assert.are.equal(1, r.code)
    assert.matches("fail failure in .* 1 failed, 1 skipped", r.stdout)
    assert.matches("broken on purpose", r.stdout)
  end)

  it("exits 2 for an invalid workflow, naming the problem", function()
    local r = run_cli { "run", FIX .. "misspelled.lua" }
    assert.are.equal(2, r.code)
    assert.matches("step 'b': unknown field 'neeeds' %(did you mean 'needs'%?%)", r.stderr)
    r = run_cli { "run", FIX .. "cycle.lua" }
    assert.are.equal(2, r.code)
    assert.matches("dependency cycle: a %-> b %-> a", r.stderr)
  end)

  it("exits 2 for usage errors and unknown steps", function()
    assert.matches("unknown option '%-%-bogus'", run_cli({ "run", "--bogus", FIX .. "ok.lua" }).stderr)
    local r = run_cli { "run", "--jobs", "zero", FIX .. "ok.lua" }
    assert.are.equal(2, r.code)
    assert.matches("%-%-jobs needs a positive integer, got 'zero'", r.stderr)
    r = run_cli { "run", "--step", "nope", FIX .. "ok.lua" }
    assert.are.equal(2, r.code)
    assert.matches("unknown step 'nope' %(known steps: first, second, other%)", r.stderr)
    r = run_cli { "run", "does/not/exist.lua" }
    assert.are.equal(2, r.code)
    assert.matches("does/not/exist.lua", r.stderr)
  end)

  it("reports setup errors in one line with exit 2, no traceback", function()
    local file = h.temp_dir()
    local f = assert(io.open(file, "w")); f:close()
    local cases = {
      { { "run", "/tmp" }, "cannot read /tmp: Is a directory" },
      { { "run", "--report-dir", file .. "/sub", FIX .. "ok.lua" }, "cannot make the report directory: cannot create directory" },
      { { "run", "--report-dir", "/proc/self", FIX .. "ok.lua" }, "cannot make the report directory: cannot create directory `/proc/self/logs`" },
      { { "run", "--replay", "/nonexistent.jsonl", FIX .. "ok.lua" }, "%-%-replay /nonexistent%.jsonl: " },
      { { "run", "--record", "/nonexistent/dir/x.jsonl", FIX .. "ok.lua" }, "%-%-record /nonexistent/dir/x%.jsonl: " },
    }
    for _, case in ipairs(cases) do
      local r = run_cli(case[1])
      assert.are.equal(2, r.code, table.concat(case[1], " ") .. "\n" .. r.stderr)
      assert.matches("^smolwf run: " .. case[2], r.stderr)
      assert.is_nil(r.stderr:find("traceback", 1, true), r.stderr)
      assert.are.equal(1, select(2, r.stderr:gsub("\n", "")), r.stderr)
    end
  end)

  it("names a workflow without a name by its file, and shows offending values", function()
    local r = run_cli { "run", FIX .. "unnamed_invalid.lua" }
    assert.are.equal(2, r.code)
    assert.are.equal("smolwf run: invalid workflow 'unnamed_invalid': workflow: field 'jobs' must be "
      .. "a positive integer, got 0\n", r.stderr)
  end)

  it("prints --list --json and --dry-run --json as JSON", function()
    local cjson = require "cjson"
    for _, flag in ipairs { "--list", "--dry-run" } do
      local r = run_cli { "run", flag, "--json", FIX .. "ok.lua" }
      assert.are.equal(0, r.code, r.stderr)
      local doc = cjson.decode(r.stdout)
      assert.are.equal("ok", doc.workflow)
      assert.are.equal(flag == "--dry-run", doc.dry_run)
      assert.are.same({ "first", "second", "other" },
        { doc.instances[1].id, doc.instances[2].id, doc.instances[3].id })
      assert.are.same({ "first" }, doc.instances[2].needs)
    end
  end)

  it("says which sandbox the steps got, and tags the default report root as a cache", function()
    local cwd = h.temp_dir()
    assert(require("lfs").mkdir(cwd))
    local fixture = require("lfs").currentdir() .. "/" .. FIX .. "local_one.lua"
    local r = run_cli({ "run", "--no-progress", fixture }, { cwd = cwd })
    assert.are.equal(0, r.code, r.stderr)
    assert.matches("\nsandbox: local/default %(no isolation, network on%)\n", r.stdout)
    local tag = h.read(cwd .. "/.smolwf/CACHEDIR.TAG")
    assert.is_string(tag, "no CACHEDIR.TAG in the report root")
    assert.are.equal("Signature: 8a477f597d28d172789f06886806bc55\n", tag:match("^[^\n]*\n"))
  end)

  it("raises on reads of undefined globals in a workflow file", function()
    local r = run_cli { "run", FIX .. "undefined_global.lua" }
    assert.are.equal(1, r.code)
    assert.matches("undefined global 'job_count'", r.stderr)
    assert.matches("undefined_global.lua:3", r.stderr)
    assert.is_nil(r.stderr:find("smol/", 1, true), "the engine's frames are noise here: " .. r.stderr)
  end)

  it("keeps an error's message when it names a path with /smol/ in it", function()
    local dir = h.temp_dir()
    local fs = require "smol.fs"
    fs.mkdir_p(dir .. "/smol")
    fs.write_file(dir .. "/smol/wf.lua", "local t = nil\nreturn t.field\n")
    local r = run_cli { "run", dir .. "/smol/wf.lua" }
    assert.are.equal(1, r.code)
    -- (Lua shortens a long chunk name from its start: "...tmp/x/smol/wf.lua")
    assert.matches("^smolwf run: [^\n]*/smol/wf%.lua:2: attempt to index a nil value", r.stderr)
    assert.matches("\nstack traceback:\n\t[^\n]*/smol/wf%.lua:2: in main chunk", r.stderr)
    fs.write_file(dir .. "/plain.lua", 'local sb <close> = require("smol.sandbox").open{profile = "local/default", workspace = ""}\n'
      .. 'sb:exec{"echo", 5}\n')
    r = run_cli { "run", dir .. "/plain.lua" }
    assert.are.equal(1, r.code)
    assert.matches("sandbox: exec: argv%[2%] must be a string\nstack traceback:\n", r.stderr)
    assert.is_nil(r.stderr:find("lua/smol/", (r.stderr:find("traceback", 1, true)), true), r.stderr)
  end)

  it("shows a table error's fields, and an os.exit in a step as what it was", function()
    local args, dir = with_report_dir { FIX .. "table_error.lua" }
    local r = run_cli(args)
    assert.are.equal(3, r.code, r.stderr)
    assert.matches("raises +failed .- error {code = 7, why = \"on purpose\"}", r.stdout)
    assert.is_nil(r.stdout:find("table: 0x", 1, true), r.stdout)
    local report = require("cjson").decode(h.read(dir .. "/report.json"))
    local by_id = {}
    for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
    assert.are.equal("failed", by_id.exits.status)
    assert.are.equal("called os.exit(3), which ends the whole run", by_id.exits.error)
    assert.are.equal("cancelled", by_id.after.status)
    assert.are.equal("step 'exits' called os.exit(3)", by_id.after.error)
    assert.are.equal("failure", report.result)
  end)

  it("lists the steps as a tree, and prints a dry run in order", function()
    local r = run_cli { "run", "--list", FIX .. "ok.lua" }
    assert.are.equal(0, r.code)
    assert.are.equal("first\n└── second\nother\n", r.stdout)
    r = run_cli { "run", "--dry-run", "--step", "second", FIX .. "ok.lua" }
    assert.are.equal(0, r.code)
    assert.matches("2 step instances would run, in this order:\n  1%. first\n  2%. second  %(needs first%)\n$", r.stdout)
  end)

  it("writes one JSON event per line with --json", function()
    local dir = h.temp_dir()
    local r = run_cli { "run", "--json", "--report-dir", dir, FIX .. "ok.lua" }
    assert.are.equal(0, r.code, r.stderr)
    local cjson = require "cjson"
    local n = 0
    for line in r.stdout:gmatch("[^\n]+") do
      assert.is_table(cjson.decode(line))
      n = n + 1
    end
    assert.is_true(n >= 8)
  end)

  it("on Ctrl-C cancels the steps, kills their processes, writes the report and exits 130", function()
    local pidfile, dir = h.temp_dir(), h.temp_dir()
    local r = run_cli({ "run", "--no-progress", "--report-dir", dir, "--param", "pidfile=" .. pidfile,
      FIX .. "sleepy.lua" }, { on_started = function(proc)
        task.spawn(function()
          assert(h.read_pid(pidfile, 10), "step never started")
          proc:kill("INT")
        end)
      end })
    assert.are.equal(130, r.code, r.stderr)
    local pid = assert(h.read_pid(pidfile, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
    local text = h.read(dir .. "/report.json")
    assert.is_string(text)
    local report = require("cjson").decode(text)
    assert.are.equal("cancelled", report.result)
    local cancelled = 0
    for _, inst in ipairs(report.instances) do
      if inst.status == "cancelled" and inst.attempts and #inst.attempts > 0 then
        local last = inst.attempts[#inst.attempts]
        assert.are.equal("cancelled", last.status, inst.id)
        assert.is_number(last.ended_at, inst.id)
        assert.are.equal("interrupted", inst.error)
        cancelled = cancelled + 1
      end
    end
    assert.is_true(cancelled > 0, "no step was cancelled while running: " .. text)
  end)

  -- Runs finally.lua; `signals` is a list of {signal, wait_for = file} sent
  -- in order once the file has a pid. Returns the result and the report.
  local function interrupted_run(signals, extra)
    local files = { pidfile = h.temp_dir(), finpid = h.temp_dir(), marker = h.temp_dir() }
    local dir = h.temp_dir()
    local args = { "run", "--no-progress", "--report-dir", dir, FIX .. "finally.lua",
      "--param", "pidfile=" .. files.pidfile, "--param", "finpid=" .. files.finpid,
      "--param", "marker=" .. files.marker }
    for _, a in ipairs(extra or {}) do args[#args + 1] = a end
    local r = run_cli(args, { on_started = function(proc)
      task.spawn(function()
        for _, s in ipairs(signals) do
          assert(h.read_pid(files[s.wait_for], 10), s.wait_for .. " never written")
          proc:kill(s[1])
        end
      end)
    end })
    local report = require("cjson").decode((assert(h.read(dir .. "/report.json"))))
    local by_id = {}
    for _, inst in ipairs(report.instances) do by_id[inst.id] = inst end
    return r, by_id, files, report
  end

  it("runs the `always` steps after Ctrl-C, then exits 130", function()
    local r, by_id, files, report = interrupted_run({ { "INT", wait_for = "pidfile" } }, { "--param", "finsleep=0.1" })
    assert.are.equal(130, r.code, r.stderr)
    assert.are.equal("done\n", h.read(files.marker), "the cleanup step did not run to its end")
    assert.are.same({ "cancelled", "interrupted" }, { by_id.long.status, by_id.long.error })
    assert.are.equal("success", by_id.cleanup.status)
    assert.are.equal("cancelled", report.result)
    local pid = assert(h.read_pid(files.pidfile, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
  end)

  it("treats TERM the same way (exit 143), and cancels `always` steps after the grace period", function()
    local r, by_id, files = interrupted_run({ { "TERM", wait_for = "pidfile" } },
      { "--param", "finsleep=30", "--grace", "0.5" })
    assert.are.equal(143, r.code, r.stderr)
    assert.are.equal("interrupted by SIGTERM", by_id.long.error)
    assert.are.same({ "cancelled", "the 0.5s grace period after the interrupt ran out" },
      { by_id.cleanup.status, by_id.cleanup.error })
    assert.is_nil(h.read(files.marker))
    local pid = assert(h.read_pid(files.finpid, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
  end)

  it("skips the `always` steps on a second Ctrl-C", function()
    local r, by_id, files = interrupted_run({ { "INT", wait_for = "pidfile" }, { "INT", wait_for = "finpid" } },
      { "--param", "finsleep=30" })
    assert.are.equal(130, r.code, r.stderr)
    assert.are.same({ "cancelled", "interrupted again: `always` steps skipped" },
      { by_id.cleanup.status, by_id.cleanup.error })
    local pid = assert(h.read_pid(files.finpid, 0))
    assert.is_true(h.wait_until(function() return not h.alive(pid) end, 5))
  end)
end)

describe("the example workflows", function()
  after_each(h.cleanup)

  it("demo builds and tests a C program in the sandbox", function()
    local args, dir = with_report_dir { "scripts/demo.lua" }
    local r = run_cli(args)
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    local tarball = h.read(dir .. "/artifacts/package/calc.tar.gz")
    assert.is_truthy(tarball and #tarball > 100)
    assert.is_nil(io.open("scripts/demo/calc", "rb"), "the host's sources stay untouched")
  end)

  it("compilers builds a matrix in isolated sessions, cached the second time, its secret masked", function()
    local cwd = h.temp_dir()
    require("smol.fs").mkdir_p(cwd)
    local script = require("lfs").currentdir() .. "/scripts/compilers.lua"
    local env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME"), UPLOAD_TOKEN = "upl0ad-t0ken" }
    local r = run_cli({ "run", "--no-progress", script }, { cwd = cwd, env = env })
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches("upload +skipped .- upload is off", r.stdout)
    r = run_cli({ "run", "--no-progress", script, "--param", "upload=yes" }, { cwd = cwd, env = env })
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches("check%[cc=gcc,opt=%-O0%] +cached", r.stdout)
    local log = h.read(cwd .. "/" .. r.stdout:match("\nreport: ([^\n]+)") .. "/logs/upload.stdout.log")
    assert.are.equal("would upload with token ***\n", log)
    assert.is_nil(r.stdout:find("upl0ad-t0ken", 1, true))
  end)

  it("matrix_retry retries every flaky shard once", function()
    local args = with_report_dir { "--jobs", "6", "scripts/matrix_retry.lua" }
    local r = run_cli(args)
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
  end)

  it("extend finds the user's module through --path and SMOLWF_PATH", function()
    local args = with_report_dir { "--path", "scripts/extend/lib", "scripts/extend.lua" }
    local r = run_cli(args)
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    args = with_report_dir { "scripts/extend.lua" }
    r = run_cli(args, { env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME"),
      SMOLWF_PATH = "scripts/extend/lib" } })
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    r = run_cli(with_report_dir { "scripts/extend.lua" }, { env = { PATH = os.getenv("PATH") } })
    assert.are.equal(1, r.code)
    assert.matches("module 'checks' not found", r.stderr)
  end)
end)
