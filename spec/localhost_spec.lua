-- sandbox.host{}: a session on this machine (smol.host_provider). What
-- every session does is in sandbox_spec.lua, which runs against it too;
-- here is what only the host does: any path, this machine's environment,
-- the directory used in place.
local sandbox = require "smol.sandbox"
local core = require "smol.core"
local task = require "smol.task"
local errors = require "smol.errors"
local h = dofile("spec/fixtures/helpers.lua")

describe("sandbox.host", function()
  local dir, host

  local handles
  before_each(function()
    handles = core.open_handles()
    dir = h.tempdir()
    host = sandbox.host{cwd = dir}
  end)
  after_each(function()
    host:close()
    sandbox.shutdown()   -- the pooled host provider too: nothing may be left open
    h.cleanup()
    assert.is_true(h.handles_back_to(handles), "uv handles left open: " .. core.open_handles() .. " > " .. handles)
  end)

  local function disk(path)
    local f = io.open(dir .. "/" .. path, "rb")
    if not f then return nil end
    local s = f:read("a")
    f:close()
    return s
  end

  it("names an unknown option (a misspelled cwd would run in the current directory)", function()
    local _, e = pcall(function() sandbox.host{cdw = dir} end)
    assert.matches("localhost_spec%.lua:%d+: sandbox%.host: unknown option `cdw` %(known: cwd%)$", e)
  end)

  describe("files", function()
    it("writes and reads binary content on disk, relative to cwd", function()
      host:write_file("a.bin", "\0\1\255")
      assert.equal("\0\1\255", disk("a.bin"))
      assert.equal("\0\1\255", host:read_file("a.bin"))
      assert.equal("\0\1\255", host:read_file(dir .. "/a.bin"))
      host:write_file("a.bin", "more", {append = true})
      assert.equal("\0\1\255more", disk("a.bin"))
      assert.same({"\1\255", false}, {host:read_file("a.bin", {offset = 1, length = 2})})
    end)

    it("raises structured errors worded like the sandbox's", function()
      local e = h.catch(host.read_file, host, "dir/a.bin")
      assert.is_true(errors.is(e, "not_found"))
      assert.matches("^failed to read sandbox file `dir/a.bin`: not_found: ", tostring(e))
      host:write_file("file", "x")
      local e2 = h.catch(host.create_dir_all, host, "file/sub")
      assert.is_true(errors.is(e2, "not_a_directory"), tostring(e2))
      assert.is_true(errors.is(h.catch(host.remove, host, "missing"), "not_found"))
    end)

    it("creates directory trees and removes them recursively", function()
      host:create_dir_all("x/y/z")
      host:create_dir_all("x/y/z")   -- existing: fine
      host:write_file("x/y/z/f", "data")
      host:create_dir_all("x/y/w")
      local entries = host:list_dir("x/y")
      assert.same({{"w", "dir"}, {"z", "dir"}}, {{entries[1].name, entries[1].type}, {entries[2].name, entries[2].type}})
      host:remove("x")
      assert.is_nil(require("lfs").attributes(dir .. "/x"))
    end)

    it("stats files and makes temp dirs", function()
      host:write_file("f", "12345", {mode = tonumber("640", 8)})
      local st = host:stat("f")
      assert.same({"file", 5, tonumber("640", 8)}, {st.type, st.size, st.mode})
      assert.is_true(st.mtime > 0)
      local tmp = host:create_temp_dir("build-")
      assert.matches("/build%-%w+$", tmp)
      assert.equal("dir", host:stat(tmp).type)
      os.execute("rmdir " .. h.shell_quote(tmp))
    end)
  end)

  describe("processes", function()
    it("returns exit code, stdout and stderr as data", function()
      local r = host:exec{"sh", "-c", "echo hi; echo err >&2; exit 3"}
      assert.same({3, "hi\n", "err\n", false}, {r.exit_code, r.stdout, r.stderr, r.ok})
    end)

    it("passes env, cwd and stdin", function()
      host:create_dir_all("sub")
      local r = host:exec{"sh", "-c", 'printf "%s:%s:" "$A" "$HOME"; pwd; cat', cwd = "sub",
                          env = {A = "1"}, stdin = "\0in"}
      assert.equal("1:" .. os.getenv("HOME") .. ":" .. dir .. "/sub\n\0in", r.stdout)
    end)

    it("answers 127 for a program that does not exist", function()
      local r = host:exec{"/nonexistent/prog"}
      assert.equal(127, r.exit_code)
      assert.matches("/nonexistent/prog", r.stderr)
    end)

    it("streams output to callbacks in order, and can skip the copy", function()
      local events, n = {}, 0
      local r = host:exec{"sh", "-c", "head -c 1000000 /dev/zero; echo x >&2", capture = false,
        on_stdout = function(c) n = n + #c end,
        on_event = function(ev) events[#events + 1] = ev.type end}
      assert.equal(1000000, n)
      assert.is_nil(r.stdout)
      assert.equal("started", events[1])
      assert.equal("exited", events[#events])
    end)

    it("caps the captured copy at max_output_bytes", function()
      local r = host:exec{"sh", "-c", "echo 0123456789", max_output_bytes = 4}
      assert.same({"0123", true}, {r.stdout, r.stdout_truncated})
    end)

    it("kills the whole process group on a wall or idle timeout", function()
      local r = host:exec{"sh", "-c", "sleep 30 & echo $!; wait", timeout = 0.2}
      assert.same({"wall", 143, "TERM"}, {r.timed_out, r.exit_code, r.signal})
      local child = tonumber(r.stdout:match("%d+"))
      assert.is_true(h.wait_until(function() return not h.alive(child) end))
      local idle = host:exec{"sh", "-c", "echo a; sleep 30", idle_timeout = 0.2}
      assert.same({"idle", "a\n"}, {idle.timed_out, idle.stdout})
    end)

    it("runs two execs in two tasks at once", function()
      -- each waits for the other to start: one after the other, the first gives up
      local rs = task.all{function() return host:exec(h.meet_argv("a", "b")) end,
                          function() return host:exec(h.meet_argv("b", "a")) end}
      assert.same({0, 0}, {rs[1].exit_code, rs[2].exit_code})
    end)

    it("kills the process of a cancelled exec", function()
      local pid
      local t = task.spawn(function()
        return host:exec{"sleep", "30", on_event = function(ev) pid = pid or tonumber(ev.process_id) end}
      end)
      assert.is_true(h.wait_until(function() return pid ~= nil end))
      t:cancel()
      assert.equal("cancelled", h.catch(t.join, t).code)
      assert.is_true(h.wait_until(function() return not h.alive(pid) end))
    end)

    it("spawns processes to write to, wait for and kill", function()
      local p = host:spawn{"cat"}
      p:write("abc")
      p:close_stdin()
      local r0 = p:wait()
      assert.same({0, "abc"}, {r0.exit_code, r0.stdout})
      local q = host:spawn{"sleep", "30"}
      local r = q:wait{timeout = 0.05}
      assert.is_true(r.running)
      q:kill("KILL")
      local rq = q:wait()
      assert.same({137, "KILL"}, {rq.exit_code, rq.signal})
      assert.is_true(errors.is(h.catch(q.wait, q), "unknown_process"))
    end)

    it("kills what it spawned when closed", function()
      local p = host:spawn{"sh", "-c", "echo $$; exec sleep 30"}
      local pid
      assert.is_true(h.wait_until(function()
        local r = p:wait{timeout = 0.01}
        pid = pid or tonumber(r.stdout:match("%d+"))
        return pid ~= nil
      end))
      host:close()
      assert.is_true(h.wait_until(function() return not h.alive(pid) end))
      assert.has_error(function() host:exec{"true"} end, "sandbox: exec: attempt to use a closed session")
      assert.has_error(function() p:wait() end, "sandbox: wait: attempt to use a closed session")
    end)
  end)
end)
