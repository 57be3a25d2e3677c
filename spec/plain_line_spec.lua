-- The host takes an exec's started, exited and result lines in their usual
-- bytes without parsing (host/smolwf/plain_line.c): any other spelling of
-- the same messages must give the same result, quiet or with callbacks,
-- and what is not JSON must still be refused. (cJSON reads a number with
-- a leading zero, 03, as 3: so must the usual bytes' reader, by leaving it to cJSON.)
local sandbox = require "smol.sandbox"
local errors = require "smol.errors"
local h = dofile("spec/fixtures/helpers.lua")

local SPELLING = h.fixture("spelling_provider.lua")

local STARTED = {"plain", "spaced", "reordered", "escaped", "extra", "float_id", "trailing"}
local EXITED = {"plain", "spaced", "reordered", "exponent", "leading_zero"}
local RESULT = {"plain", "spaced", "reordered", "fraction", "escaped", "no_copy", "null_copy", "leading_zero"}

describe("an exec's usual reply lines", function()
  local sb
  before_each(function() sb = sandbox.open{program = SPELLING, profile = "spell/x", workspace = ""} end)
  after_each(function()
    sb:close()
    sandbox.shutdown()
  end)

  -- The result without argv (which names the spelling), and the events seen.
  local function run(started, exited, result, code, callbacks)
    local events = {}
    local spec = {"spell", started, exited, result, code}
    if callbacks then spec.on_event = function(ev) events[#events + 1] = ev.type .. ":" .. tostring(ev.process_id or ev.exit_code) end end
    local r = sb:exec(spec)
    r.argv = nil
    return r, events
  end

  for _, callbacks in ipairs{false, true} do
    local how = callbacks and "with callbacks" or "quiet"
    for _, code in ipairs{"0", "3", "255"} do
      it(("mean the same in every spelling (%s, exit code %s)"):format(how, code), function()
        local want, want_events = run("plain", "plain", "plain", code, callbacks)
        assert.same({ok = code == "0", exit_code = tonumber(code), stdout = "", stderr = "", process_id = "p-1_A"}, want)
        if callbacks then assert.same({"started:p-1_A", "exited:" .. code}, want_events) end
        for _, s in ipairs(STARTED) do
          for _, e in ipairs(EXITED) do
            for _, r in ipairs(RESULT) do
              local got, events = run(s, e, r, code, callbacks)
              local what = s .. "/" .. e .. "/" .. r
              assert.same(want, got, what)
              assert.same(want_events, events, what)
            end
          end
        end
      end)
    end
  end

  it("keep what a different value means: more members are read, not skipped", function()
    local r = run("plain", "plain", "extra", "0")
    assert.is_true(r.running)
    assert.is_false(r.ok)
  end)

  it("fault on a line that is not JSON even when it starts in the usual bytes", function()
    local ok, err = pcall(sb.exec, sb, {"spell", "plain", "plain", "cut"})
    assert.is_false(ok)
    assert.is_true(errors.is(err, "protocol"), tostring(err))
    assert.matches("not valid JSON", err.message)
  end)

end)
