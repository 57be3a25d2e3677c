-- report.html (smol.workflow.report_html, smol.workflow.gantt): one
-- self-contained page with a Gantt timeline as inline SVG, the summary
-- table and each step's log; rendered for real with headless Chromium.
local logs = require "smol.workflow.logs"
local report_html = require "smol.workflow.report_html"
local gantt = require "smol.workflow.gantt"

local fixtures = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "fixtures/"
local helpers = dofile(fixtures .. "report_helpers.lua")
local workflow_run = dofile(fixtures .. "workflow_run.lua")

local function count(s, plain)
  local n, at = 0, 1
  while true do
    local i = s:find(plain, at, true)
    if not i then return n end
    n, at = n + 1, i + #plain
  end
end

local CHROMIUM_FLAGS = "--headless --no-sandbox --disable-gpu --disable-background-networking"
  .. " --disable-component-update --disable-sync --no-first-run --window-size=1200,1600"

-- Chromium's crash handler double-forks and outlives the browser; in a PID
-- namespace of its own (bwrap, a project dependency) every process it
-- started is killed and reaped when it exits, so no test leaves one behind.
local function pid_namespace_prefix()
  if not helpers.which("bwrap") then return "" end
  return "bwrap --dev-bind / / --proc /proc --unshare-pid --die-with-parent "
end

-- Runs headless Chromium on the page with a throwaway profile directory,
-- which is also its HOME and its TMPDIR: a short path outside the build
-- tree, because Chromium makes a Unix socket in TMPDIR (a path of at most
-- 107 bytes, which a build tree's TMPDIR can pass) and links it from the
-- profile, and a spec copying the checkout as a workspace must not meet
-- them half removed.
local function chromium(chrome, profile, args, page)
  -- HOME too: as an unprivileged user (HOME=/nonexistent) the crash handler fails to start.
  local cmd = string.format("HOME=%q TMPDIR=%q timeout 60 %s%q %s --user-data-dir=%q %s %q 2>/dev/null",
    profile, profile, pid_namespace_prefix(), chrome, CHROMIUM_FLAGS, profile, args, "file://" .. page)
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok, _, code = p:close()
  assert(ok, "chromium failed (exit " .. tostring(code) .. "): " .. cmd)
  return out
end

describe("workflow report.html", function()
  local dir, run, html
  before_each(function()
    dir = helpers.tmpdir()
    run = workflow_run.play(dir, {logs.new()}, {artifact_files = true})
    assert.are.equal(dir .. "/report.html", report_html.write(run))
    html = helpers.read(dir .. "/report.html")
  end)
  after_each(function() helpers.rmtree(dir) end)

  it("is self-contained: no script, no external URL, no fetched resource", function()
    assert.is_nil(html:find("https?://"))
    assert.is_nil(html:find("<script", 1, true))
    assert.is_nil(html:find("<link", 1, true))
    assert.is_nil(html:find("src=", 1, true))
    assert.is_nil(html:find("url%("))
    assert.is_nil(html:find("@import", 1, true))
  end)

  it("has a Gantt chart with one row per instance, every attempt and the retry wait", function()
    local svg = html:match("<svg.-</svg>")
    assert.is_not_nil(svg)
    for _, inst in ipairs(run.instances) do
      assert.truthy(svg:find(">" .. inst.id .. "<title>", 1, true), inst.id)
    end
    -- 7 instances ran, build twice: 8 attempt bars (each class once more in the legend).
    assert.are.equal(4, count(svg, '<rect class="success"') - 1)
    assert.are.equal(3, count(svg, '<rect class="failed"') - 1)
    assert.are.equal(1, count(svg, '<rect class="timed_out"') - 1)
    assert.are.equal(1, count(svg, '<line class="backoff"') - 1)   -- one more in the legend
    assert.are.equal(1, count(svg, '<circle class="skipped"') - 1)
    assert.truthy(svg:find("build, attempt 1: failed", 1, true))
    for _, label in ipairs({"queued", "ok", "failed", "timed out", "retry wait", "skipped"}) do
      assert.truthy(svg:find('class="legend"[^>]*>' .. label .. "<"), label)
    end
  end)

  it("draws an attempt cut short by Ctrl-C as cancelled, up to the run's end", function()
    -- What an interrupted run may record: the attempt never got its end.
    local cut = {name = "cut", started_at = 100, ended_at = 110, result = "cancelled", instances = {
      {id = "slow", step = "slow", status = "cancelled", started_at = 101, error = "cancelled: interrupted",
       attempts = {{started_at = 101, status = "running"}}},
      {id = "done", step = "done", status = "success", started_at = 100, ended_at = 102,
       attempts = {{started_at = 100, ended_at = 102, status = "success"}}}}}
    local svg = gantt.render(cut)
    assert.are.equal(0, count(svg, '<rect class="running"') - 1)
    local x, width = svg:match('<rect class="cancelled" x="([%d.]+)" y="[%d.]+" width="([%d.]+)"')
    assert.is_not_nil(x, svg)
    local x_end = svg:match('<text class="tick" x="([%d.]+)" y="%d+">10s</text>')
    assert.is_true(math.abs(tonumber(x) + tonumber(width) - tonumber(x_end)) < 0.2, svg)
    assert.truthy(svg:find("slow, attempt 1: cancelled", 1, true))
  end)

  it("keeps long ids that share a prefix apart in the timeline's labels", function()
    local many = {name = "long", started_at = 0, ended_at = 1, instances = {}}
    for i = 1, 40 do
      many.instances[i] = {id = string.format("integration-tests-for-the-storage-backend[variant=%02d]", i),
                           status = "success", attempts = {}}
    end
    local labels, seen = {}, {}
    for label in gantt.render(many):gmatch('<text class="label"[^>]*>([^<]*)<title>') do
      assert.is_true(utf8.len(label) <= 48, label)
      assert.is_nil(seen[label], "two rows read " .. label)
      seen[label], labels[#labels + 1] = true, label
    end
    assert.are.equal(40, #labels)
    assert.matches("^integration.*….*=01%]$", labels[1])
  end)

  it("has a time axis with round ticks", function()
    assert.are.equal(1, gantt.tick_step(4.8))
    assert.are.equal(0.5, gantt.tick_step(3))
    assert.are.equal(20, gantt.tick_step(120))
    assert.are.equal("0.5s", gantt.tick_label(0.5))
    assert.are.equal("2m30s", gantt.tick_label(150))
    local svg = html:match("<svg.-</svg>")
    for _, t in ipairs({"0s", "1s", "2s", "3s", "4s"}) do
      assert.truthy(svg:find('class="tick"[^>]*>' .. t .. "<"), t)
    end
  end)

  it("has the summary table and each step's log, HTML-escaped, failures open", function()
    assert.are.equal(8, count(html, "<details"))
    assert.are.equal(2, count(html, "<details id=\"log-4\" open>") + count(html, "<details id=\"log-5\" open>"))
    assert.truthy(html:find("main.c:3: warning: &lt;unused&gt; &amp; \"odd\"", 1, true))
    assert.is_nil(html:find("<unused>", 1, true))
    assert.truthy(html:find("\u{FFFD}\u{FFFD} binary junk", 1, true))
    assert.truthy(html:find('<b>package</b> — skipped, -</summary>\n<div class="log"><p class="empty">this step did not run</p>', 1, true))
    assert.truthy(html:find('<b>collect</b> — ok, 270ms, 1 artifact</summary>\n<div class="log"><h3>artifacts</h3>', 1, true))
    assert.truthy(html:find('<p class="empty">no output</p>', 1, true))
    assert.truthy(html:find('<td class="status st-failed">✗ failed</td><td class="step"><a href="#log-4">test[shard=2]</a></td>', 1, true))
  end)

  it("lists each step's artifacts as relative links, and names the missing ones", function()
    assert.truthy(html:find('<ul class="artifacts"><li><a href="artifacts/test-logs">artifacts/test-logs</a></li></ul>', 1, true))
    assert.truthy(html:find('<td class="step"><a href="#log-8">collect</a><br><a class="meta" href="#log-8">1 artifact</a></td>', 1, true))
    run.instances[8].artifacts = {"artifacts/test-logs", "artifacts/a #1?.txt", "artifacts/gone"}
    helpers.write(dir .. "/artifacts/a #1?.txt", "x")
    local page = report_html.render(run)
    assert.truthy(page:find('<a href="artifacts/a%20%231%3F.txt">artifacts/a #1?.txt</a>', 1, true))
    assert.truthy(page:find('<li class="missing">artifacts/gone (missing)</li>', 1, true))
  end)

  it("keeps status cells on one line and aligns the cells of a row on their first line", function()
    assert.truthy(html:find(".steps td.status{white-space:nowrap}", 1, true))
    assert.truthy(html:find("vertical-align:baseline", 1, true))
  end)

  it("names the sandbox the steps ran in, and flags one without isolation", function()
    assert.is_nil(html:find(" · sandbox ", 1, true))      -- the engine did not say: nothing shown
    run.sandbox = {profile = "auto/default", provider_profile = "local/unconfined", isolation = "none", network = true}
    local page = report_html.render(run)
    assert.truthy(page:find( ' · sandbox <span class="warn">auto/default → local/unconfined (no isolation, network on)</span>', 1, true))
    assert.is_nil(page:find("<th>Sandbox</th>", 1, true))
    run.instances[2].sandbox = {profile = "bwrap/strict", isolation = "namespaces", network = false}
    page = report_html.render(run)
    assert.truthy(page:find("<th>Sandbox</th>", 1, true))
    assert.truthy(page:find('<td class="sandbox">bwrap/strict (isolation: namespaces, no network)</td>', 1, true))
  end)

  it("shows the end of a huge log and links the full file", function()
    local big = {}
    for i = 1, 40000 do big[i] = "line " .. i end
    helpers.write(dir .. "/" .. run.instances[1].logs.stdout, table.concat(big, "\n") .. "\n")
    local page = report_html.render(run)
    assert.truthy(page:find("last 256 KiB shown", 1, true))
    assert.truthy(page:find("line 40000\n", 1, true))
    assert.is_nil(page:find(">line 1\n", 1, true))
    assert.is_true(#page < 400 * 1024)
  end)

  describe("in headless Chromium", function()
    local chrome = helpers.which("chromium")
    local profile
    before_each(function() profile = assert(require("smol.core").mkdtemp("/tmp/smolwf-chromium-XXXXXX")) end)
    after_each(function() require("smol.fs").remove_tree(profile) end)

    it("renders the steps and the SVG timeline", function()
      if not chrome then pending("chromium not installed (apt-get install chromium)"); return end
      local dom = chromium(chrome, profile, "--dump-dom", dir .. "/report.html")
      assert.truthy(dom:find("<svg", 1, true))
      for _, inst in ipairs(run.instances) do
        assert.truthy(dom:find(inst.id, 1, true), inst.id)
      end
      assert.are.equal(8, count(dom, "<details"))
      assert.are.same({}, helpers.processes_matching(profile), "a chromium process outlived the test")
    end)

    it("does not scroll sideways with long names, commands and output", function()
      if not chrome then pending("chromium not installed (apt-get install chromium)"); return end
      local long = string.rep("x", 400)
      run.name = "wide-" .. long
      run.instances[1].id = "deps-" .. long
      run.instances[2].error = "command `make " .. long .. "` failed with exit code 2"
      report_html.write(run)
      -- A copy that says how far the page scrolls sideways (the report itself has no script).
      local page = helpers.read(dir .. "/report.html"):gsub("</body>", function()
        return "<script>var d = document.documentElement;"
          .. "document.body.setAttribute('data-overflow', d.scrollWidth - d.clientWidth)</script></body>"
      end)
      helpers.write(dir .. "/measured.html", page)
      local dom = chromium(chrome, profile, "--dump-dom", dir .. "/measured.html")
      assert.are.equal("0", dom:match('data%-overflow="(%-?%d+)"'))
    end)

    it("takes a screenshot of the page", function()
      if not chrome then pending("chromium not installed (apt-get install chromium)"); return end
      local png = dir .. "/report.png"
      chromium(chrome, profile, "--screenshot=" .. png, dir .. "/report.html")
      local data = helpers.read(png)
      assert.are.equal("\137PNG\r\n\26\n", data:sub(1, 8))
      assert.is_true(#data > 20000)   -- a blank page is a few KiB
    end)
  end)
end)
