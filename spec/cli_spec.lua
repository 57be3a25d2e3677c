-- The smolwf command line: runs the real binary (core.exe_path()) as a child.
local core = require "smol.core"
local task = require "smol.task"
local lfs = require "lfs"
local fs = require "smol.fs"
local h = dofile("spec/fixtures/helpers.lua")

local EXE = core.exe_path()

local function base_env(extra)
  local env = {PATH = os.getenv("PATH") or "/usr/bin:/bin", HOME = os.getenv("HOME") or "/"}
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

--[[
Runs smolwf with args; opts.stdin (bytes), opts.env, opts.cwd,
opts.on_line(line, proc) sees stdout lines as they come.
Returns {code, signal, out, err}.
]]
local function smolwf(args, opts)
  opts = opts or {}
  local out, err, done = {}, {}, task.event()
  local p
  p = assert(core.spawn{file = EXE, args = {EXE, table.unpack(args)},
    env = base_env(opts.env), cwd = opts.cwd, stdin = opts.stdin ~= nil,
    stdout = "lines", stderr = "chunks",
    on_stdout = function(line)
      if line then out[#out + 1] = line end
      if line and opts.on_line then opts.on_line(line, p) end
    end,
    on_stderr = function(d) err[#err + 1] = d end,
    on_exit = function(code, sig) done:set(code, sig) end})
  if opts.stdin then
    p:write(opts.stdin)
    p:close_stdin()
  end
  local watchdog = core.timer(20, function() p:kill("KILL") end)  -- a hang fails, not hangs
  local code, sig = done:wait()
  watchdog:stop()
  p:close()
  return {code = code, signal = sig, out = table.concat(out, "\n"), err = table.concat(err)}
end

local write_file = fs.write_file

-- Running (a zombie is dead: an orphan's zombie waits for init here, not for us).
local alive = h.alive

-- Whether pid is gone, given the time a loaded machine may take: a
-- grandchild the host KILLed dies when it is next scheduled, and nobody
-- the test can wait for reaps it.
local function gone(pid)
  return h.wait_until(function() return not alive(pid) end)
end

describe("smolwf command line", function()
  local dir

  local baseline  -- other specs in the same run may leave handles open (a shared provider)
  before_each(function()
    dir = fs.temp_dir("smolwf-cli")
    baseline = core.open_handles()
  end)

  after_each(function()
    fs.remove_tree(dir)
    assert.is_true(h.handles_back_to(baseline), "uv handles left open: " .. core.open_handles() .. " > " .. baseline)
  end)

  it("builds arg as lua5.4 does and passes the arguments as varargs", function()
    local script = dir .. "/args.lua"
    write_file(script, "print(arg[-3], arg[-2], arg[-1], arg[0], #arg, ...)")
    local r = smolwf({"--path", dir, script, "a", "b"})
    assert.equal(0, r.code)
    assert.equal(table.concat({EXE, "--path", dir, script, "2", "a", "b"}, "\t"), r.out)
  end)

  it("runs scripts starting with #!", function()
    local script = dir .. "/shebang"
    write_file(script, "#!/usr/bin/env smolwf\nprint('ran', ...)\n")
    local r = smolwf({script, "x"})
    assert.same({0, "ran\tx"}, {r.code, r.out})
  end)

  it("runs -e in order, then the script", function()
    local script = dir .. "/s.lua"
    write_file(script, "print('script', X)")
    local r = smolwf({"-e", "X = 1", "-eprint('e', X)", script})
    assert.same({0, "e\t1\nscript\t1"}, {r.code, r.out})
  end)

  it("runs stdin with -", function()
    local r = smolwf({"-", "x"}, {stdin = "print('from stdin', arg[0], ...)"})
    assert.same({0, "from stdin\t-\tx"}, {r.code, r.out})
  end)

  it("prints the version with -v and help with --help", function()
    local r = smolwf({"-v"})
    assert.equal(0, r.code)
    assert.matches("^smolwf %d+%.%d+%.%d+ %(Lua 5%.4", r.out)
    r = smolwf({"--help"})
    assert.equal(0, r.code)
    assert.matches("usage: smolwf", r.out)
    assert.matches("%-%-path DIR", r.out)
  end)

  it("lists every command in --help, one line each, and each has its own --help", function()
    local r = smolwf({"--help"})
    assert.matches("See smolwf COMMAND %-%-help", r.out)
    local listed = 0
    for file in lfs.dir(core.exe_path():match("^(.*)/") .. "/lua/smol/cli") do
      local name = file:match("^(.-)%.lua$")
      if name then
        local command = name:gsub("_", "-")
        local words = command == "provider" and "provider serve" or command
        assert.matches("\n  " .. words:gsub("%-", "%%-") .. " [^\n]*%w[^\n]*\n", r.out)
        local sub = smolwf({command, "--help"})
        assert.equal(0, sub.code, command .. " --help: " .. sub.err)
        assert.matches("usage: smolwf " .. command:gsub("%-", "%%-"), sub.out)
        listed = listed + 1
      end
    end
    assert.is_true(listed >= 4)
  end)

  it("rejects an unknown option with usage and status 1", function()
    local r = smolwf({"--bogus"})
    assert.equal(1, r.code)
    assert.matches("smolwf: unrecognized option '%-%-bogus'", r.err)
    assert.matches("usage:", r.err)
    r = smolwf({"-e"})
    assert.equal(1, r.code)
    assert.matches("option needs an argument", r.err)
  end)

  it("prints a traceback with file:line and exits 1 on an error", function()
    local script = dir .. "/fail.lua"
    write_file(script, "local function f()\n  error('boom')\nend\nf()\n")
    local r = smolwf({script})
    assert.equal(1, r.code)
    assert.matches("^smolwf: [^\n]*fail%.lua:2: boom\nstack traceback:", r.err)
    assert.matches("fail%.lua:4: in main chunk", r.err)
    r = smolwf({dir .. "/missing.lua"})
    assert.equal(1, r.code)
    assert.matches("cannot open .*missing%.lua", r.err)
    r = smolwf({"-e", "error({code = 'x'})"})
    assert.equal(1, r.code)
    assert.matches("error object is a table value", r.err)
  end)

  it("shows the user's frames of an error and hides the host's unless SMOLWF_TRACE=1", function()
    local script = dir .. "/reads.lua"
    write_file(script, "local sandbox = require 'smol.sandbox'\nlocal function work()\n"
      .. "  sandbox.host{}:read_file('/nonexistent/file')\nend\nwork()\n")
    local function frames(err) return err:match("\nstack traceback:\n(.*)$") or "" end
    for _, args in ipairs{{script}, {"run", script}} do
      local r = smolwf(args)
      assert.equal(1, r.code)
      assert.matches("^smolwf[^\n]*: failed to read sandbox file `/nonexistent/file`", r.err)
      assert.equal("\treads.lua:3: in local 'work'\n\treads.lua:5: in main chunk\n"
        .. "\t(2 frames of smolwf's own hidden: SMOLWF_TRACE=1 shows them)\n",
        (frames(r.err):gsub("\t[^\n]*/reads", "\treads")))
      r = smolwf(args, {env = {SMOLWF_TRACE = "1"}})
      assert.matches("\t%[C%]: in function 'error'\n\t[^\n]*/smol/sandbox%.lua:%d+: in method 'call'\n", frames(r.err))
      assert.matches("reads%.lua:3: in local 'work'", frames(r.err))
    end
    write_file(script, "require('smol.task').spawn(function() error('late') end)\n")
    local r = smolwf({script})
    assert.equal(1, r.code)
    assert.matches("^smolwf: error in task: [^\n]*reads%.lua:1: late\nstack traceback:\n\t[^\n]*reads%.lua:1: in function <", r.err)
    assert.is_nil(r.err:find("task.lua", 1, true), r.err)
    assert.is_nil(r.err:find("[C]", 1, true), r.err)
  end)

  it("finds modules through --path and SMOLWF_PATH, and lua/ next to it", function()
    os.execute("mkdir -p '" .. dir .. "/a' '" .. dir .. "/b/pkg'")
    write_file(dir .. "/a/moda.lua", "return 'A'")
    write_file(dir .. "/b/pkg/init.lua", "return 'PKG'")
    write_file(dir .. "/c.lua", "return 'C'")
    local code = "print(require'moda', require'pkg', require'c', require'smol.task' ~= nil, require'cjson' ~= nil)"
    local r = smolwf({"--path", dir .. "/a", "--path=" .. dir .. "/b", "-e", code}, {cwd = dir})
    assert.same({0, "A\tPKG\tC\ttrue\ttrue"}, {r.code, r.out})
    r = smolwf({"-e", code}, {cwd = dir, env = {SMOLWF_PATH = dir .. "/a:" .. dir .. "/b"}})
    assert.same({0, "A\tPKG\tC\ttrue\ttrue"}, {r.code, r.out})
  end)

  it("finds lua/ under ../share/smolwf once installed", function()
    local build_lua = EXE:match("^(.*)/") .. "/lua"
    assert.is_true(os.execute(("mkdir -p '%s/bin' '%s/share/smolwf' && cp '%s' '%s/bin/smolwf' && ln -s '%s' '%s/share/smolwf/lua'")
      :format(dir, dir, EXE, dir, build_lua, dir)))
    local out, done = {}, task.event()
    local p = assert(core.spawn{file = dir .. "/bin/smolwf", args = {"smolwf", "-e",
      "print(package.path:match('^[^;]*'), require('smol.task') ~= nil)"},
      stdout = "lines", on_stdout = function(l) out[#out + 1] = l end,
      on_exit = function(c) done:set(c) end})
    assert.equal(0, done:wait())
    p:close()
    assert.same({dir .. "/bin/../share/smolwf/lua/?.lua\ttrue"}, out)
  end)

  it("runs `smolwf run SCRIPT` like `smolwf SCRIPT`", function()
    local script = dir .. "/r.lua"
    write_file(script, "print(arg[0], ...)")
    local r = smolwf({"run", script, "a"})
    assert.same({0, script .. "\ta"}, {r.code, r.out})
  end)

  it("exits with the status a plain script returns, with and without `run`", function()
    local script = dir .. "/status.lua"
    for _, case in ipairs{{"return 42", 42, ""}, {"return false", 1, ""}, {"return true", 0, ""},
        {"return 'text'", 0, ""}, {"os.exit(3)", 3, ""}, {"error('boom')", 1, "boom"},
        {"return 300", 1, "returned 300, not an exit status %(0%-255%)"}} do
      write_file(script, case[1])
      for _, args in ipairs{{script}, {"run", script}} do
        local r = smolwf(args)
        assert.equal(case[2], r.code, case[1] .. " under " .. table.concat(args, " "))
        assert.matches(case[3], r.err)
      end
    end
    assert.same({5, ""}, {smolwf({"-"}, {stdin = "return 5"}).code, smolwf({"-"}, {stdin = "return 5"}).err})
    assert.matches("Exit status: a script's integer result", smolwf({"--help"}).out)
  end)

  it("dispatches other commands to smol.cli.NAME.main(args)", function()
    os.execute("mkdir -p '" .. dir .. "/smol/cli'")
    write_file(dir .. "/smol/cli/hello_there.lua",
      "return {main = function(args) print('hello', #args, args[1]) return 3 end}")
    local r = smolwf({"--path", dir, "hello-there", "x"})
    assert.same({3, "hello\t1\tx"}, {r.code, r.out})
    r = smolwf({"nosuchcommand"})
    assert.equal(1, r.code)
    assert.matches("smolwf: unknown command 'nosuchcommand'", r.err)
  end)

  it("suggests the command or option a typo meant", function()
    local r = smolwf({"rnu", "wf.lua"})
    assert.same({1, "smolwf: unknown command 'rnu' (did you mean 'run'?)\n"}, {r.code, r.err})
    r = smolwf({"provider-chek"})
    assert.matches("did you mean 'provider%-check'%?", r.err)
    r = smolwf({"--pth", dir})
    assert.equal(1, r.code)
    assert.matches("^smolwf: unrecognized option '%-%-pth' %(did you mean '%-%-path'%?%)\nusage:", r.err)
  end)

  it("refuses to silently do nothing with a file that returns a workflow", function()
    local file = dir .. "/wf.lua"
    write_file(file, [[return require("smol.workflow").define{steps = {
      {name = "a", run = function() print("ran a") end}}}]])
    local r = smolwf({file})
    assert.equal(1, r.code)
    assert.equal("", r.out)
    assert.equal(("smolwf: %s returned a workflow; run it with: smolwf run %s\n"):format(file, file), r.err)
    write_file(file, "return {answer = 42}")
    assert.same({0, ""}, {smolwf({file}).code, smolwf({file}).err})
  end)

  it("reports an error in a loop callback and exits non-zero", function()
    local r = smolwf({"-e", [[
      local core = require "smol.core"
      core.timer(0, function() error("callback boom") end)
      core.run_once()
      print("carried on")]]})
    assert.equal(1, r.code)
    assert.equal("carried on", r.out)
    assert.matches("smolwf: error in callback: [^\n]*callback boom\nstack traceback:", r.err)
  end)

  it("makes os.exit kill what the run started, and keeps its status", function()
    local r = smolwf({"-e", [[
      local core = require "smol.core"
      local p = core.spawn{file = "sleep", args = {"sleep", "100"}}
      print(p.pid)
      io.stdout:flush()
      os.exit(3, true)]]})
    assert.equal(3, r.code)
    assert.is_true(gone(tonumber(r.out)))
  end)

  it("kills what the run started at a normal end", function()
    local r = smolwf({"-e", [[
      local p = require("smol.core").spawn{file = "sleep", args = {"sleep", "100"}, process_group = true}
      print(p.pid)]]})
    assert.equal(0, r.code)
    assert.is_true(gone(tonumber(r.out)))
  end)

  it("KILLs what ignores TERM at the end, after a short grace", function()
    local r = smolwf({"-e", [[
      local core = require "smol.core"
      local sleeper
      local p = core.spawn{file = "/bin/sh", args = {"sh", "-c", "trap '' TERM; sleep 100 & echo $!; wait"},
        process_group = true, stdout = "lines", on_stdout = function(l) sleeper = sleeper or l end}
      while not sleeper do core.run_once() end
      print(p.pid .. " " .. sleeper)]]})
    assert.equal(0, r.code)
    local shell, sleeper = r.out:match("^(%d+) (%d+)$")
    assert.is_true(gone(shell))
    assert.is_true(gone(sleeper))
  end)

  describe("Ctrl-C", function()
    -- Starts a script, waits for its first line (the pid of its child), sends SIGINT.
    local function interrupt(script, signal)
      local child
      local r = smolwf({"-e", script}, {on_line = function(line, p)
        if child == nil then
          child = tonumber(line)
          p:kill(signal or "INT")
        end
      end})
      return r, child
    end

    it("ends the wait for unfinished tasks after the main chunk", function()
      local r, child = interrupt([[
        local core = require "smol.core"
        local task = require "smol.task"
        task.spawn(function()
          local p = core.spawn{file = "sleep", args = {"sleep", "100"}}
          print(p.pid)
          io.stdout:flush()
          task.sleep(100)
        end)]])
      assert.equal(130, r.code)
      assert.is_true(gone(child))
    end)

    it("stops a task spinning in Lua", function()
      local r, child = interrupt([[
        local task = require "smol.task"
        task.spawn(function()
          local p = require("smol.core").spawn{file = "sleep", args = {"sleep", "100"}}
          print(p.pid)
          io.stdout:flush()
          while true do end
        end)]])
      assert.same({130, nil}, {r.code, r.signal})
      assert.equal("smolwf: interrupted\n", r.err)  -- once: not also as a task's error
      assert.is_true(gone(child))
    end)

    it("treats SIGTERM the same way, with status 143", function()
      local r, child = interrupt([[
        local p = require("smol.core").spawn{file = "sleep", args = {"sleep", "100"}}
        print(p.pid)
        io.stdout:flush()
        require("smol.task").sleep(100)]], "TERM")
      assert.same({143, nil}, {r.code, r.signal})  -- exited by itself, not killed by TERM
      assert.is_true(gone(child))
    end)

    it("ends a run waiting in the loop with 130 and leaves no process behind", function()
      local r, child = interrupt([[
        local core = require "smol.core"
        local task = require "smol.task"
        task.at_exit(function() print("exit hook ran") end)
        local p = core.spawn{file = "sleep", args = {"sleep", "100"}}
        print(p.pid)
        io.stdout:flush()
        task.sleep(100)]])
      assert.same({130, nil}, {r.code, r.signal})  -- exited by itself, not killed by INT
      assert.matches("exit hook ran", r.out)
      assert.matches("smolwf: interrupted", r.err)
      assert.is_number(child)
      assert.is_true(gone(child))
    end)

    it("stops a pure-Lua loop, even one that swallows errors with pcall", function()
      local r, child = interrupt([[
        local p = require("smol.core").spawn{file = "sleep", args = {"sleep", "100"}}
        print(p.pid)
        io.stdout:flush()
        while true do pcall(function() for _ = 1, 1e6 do end end) end]])
      assert.equal(130, r.code)
      assert.is_true(gone(child))
    end)
  end)
end)
