-- Secrets: from the environment or a --param, given to every command as
-- environment variables, and masked everywhere text leaves the host.
local lfs = require "lfs"
local mask = require "smol.workflow.mask"
local core = require "smol.core"
local h = require "spec.workflow_helpers"

-- A token with a quote, a backslash and a slash: its JSON form differs.
local TOKEN = 'tok"en\\with/slash-0123456789'
local KEY = "k3y-from-a-param"
local PEM = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcN\n-----END KEY-----"

-- Every form a leak could take.
local function leaked_forms()
  local cjson = require "cjson"
  return { TOKEN, KEY, "MIIBOgIBAAJBAKj34GkxFhD90vcN", core.b64encode(TOKEN):sub(1, 20),
    core.b64encode("user:" .. TOKEN):sub(9, 30), cjson.encode(TOKEN):sub(2, -2),
    (cjson.encode(TOKEN):sub(2, -2):gsub("\\/", "/")) }
end

local function files_under(dir, out)
  out = out or {}
  for name in lfs.dir(dir) do
    if name ~= "." and name ~= ".." then
      local path = dir .. "/" .. name
      if lfs.attributes(path, "mode") == "directory" then files_under(path, out) else out[#out + 1] = path end
    end
  end
  return out
end

local function assert_no_secret(text, where)
  for _, form in ipairs(leaked_forms()) do
    assert.is_nil(text:find(form, 1, true), ("%s shows %q:\n%s"):format(where, form, text))
  end
end

local function run_secrets(extra)
  local dir = h.temp_dir()
  local args = { "run", "--report-dir", dir, "spec/fixtures/workflows/secrets.lua", "--param", "key=" .. KEY }
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  local r = h.smolwf(args, { env = { PATH = os.getenv("PATH"), SPEC_TOKEN = TOKEN, SPEC_PEM = PEM } })
  return r, dir
end

describe("workflow secrets", function()
  after_each(h.cleanup)

  it("reach commands as environment variables and are masked in the terminal, logs and reports", function()
    local r, dir = run_secrets()
    assert.are.equal(1, r.code, r.stderr)
    assert.matches("%[leak%] token=%*%*%*\n", r.stdout)
    assert.matches("%[leak%] %*%*%*[%w+/]?[%w+/]?=* key=%*%*%*\n", r.stdout)
    assert.matches("fail +failed .- cannot use %*%*%*", r.stdout)
    assert_no_secret(r.stdout .. r.stderr, "the terminal")
    local files = files_under(dir)
    assert.is_true(#files >= 5, table.concat(files, " "))
    for _, file in ipairs(files) do assert_no_secret(h.read(file), file) end
    local report = require("cjson").decode((h.read(dir .. "/report.json")))
    assert.are.equal("***", report.params.key)
    assert.are.same({ token = "***", json = '{"t":"***"}' }, report.instances[1].value)
  end)

  it("are masked in --json events", function()
    local r = run_secrets { "--json" }
    assert.are.equal(1, r.code, r.stderr)
    assert.matches('"type":"step_output"', r.stdout)
    assert_no_secret(r.stdout .. r.stderr, "the --json events")
  end)

  it("are refused when missing or shorter than 4 bytes, naming the secret", function()
    local r = h.smolwf({ "run", "spec/fixtures/workflows/secrets.lua", "--param", "key=" .. KEY },
      { env = { PATH = os.getenv("PATH"), SPEC_PEM = PEM } })
    assert.are.same({ 2, "smolwf run: secret TOKEN: the environment variable SPEC_TOKEN is not set\n" },
      { r.code, r.stderr })
    r = h.smolwf({ "run", "spec/fixtures/workflows/secrets.lua", "--param", "key=abc" },
      { env = { PATH = os.getenv("PATH"), SPEC_TOKEN = TOKEN, SPEC_PEM = PEM } })
    assert.are.equal(2, r.code)
    assert.matches("^smolwf run: secret KEY is 3 bytes long: secrets shorter than 4 bytes are refused", r.stderr)
  end)

  it("may be optional: absent, the variable is unset; given, it is masked as any other", function()
    local dir = h.temp_dir()
    local fs = require "smol.fs"
    fs.mkdir_p(dir)
    local file = dir .. "/wf.lua"
    fs.write_file(file, [[
local wf = require "smol.workflow"
return wf.define{name = "opt", sandbox = {profile = "local/default"},
  secrets = {DEPLOY = {env = "SPEC_ABSENT", optional = true}, GIVEN = {param = "given", optional = true}},
  steps = {{name = "s", run = function(ctx)
    ctx:sh('echo "deploy=${DEPLOY-unset} given=${GIVEN-unset}"')
    ctx.log("lua sees", tostring(ctx.secrets.DEPLOY))
  end}}}
]])
    local env = { PATH = os.getenv("PATH") }
    local r = h.smolwf({ "run", "--report-dir", dir .. "/r1", file }, { env = env })
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches("deploy=unset given=unset\n", r.stdout)
    assert.matches("lua sees nil", r.stdout)
    r = h.smolwf({ "run", "--report-dir", dir .. "/r2", file, "--param", "given=" .. KEY }, { env = env })
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches("deploy=unset given=%*%*%*\n", r.stdout)
    assert.is_nil(r.stdout:find(KEY, 1, true))
    fs.write_file(dir .. "/bad.lua", (h.read(file):gsub("optional = true}, GIVEN", "optional = 1}, GIVEN")))
    r = h.smolwf({ "run", dir .. "/bad.lua" }, { env = env })
    assert.are.equal(2, r.code)
    assert.matches("secret 'DEPLOY'.*optional", r.stderr)
  end)
end)

describe("the masker", function()
  it("masks each line of a multi-line value, its base64 at every alignment, JSON and XML forms", function()
    local m = mask.new { PEM, TOKEN }
    assert.are.equal("a *** b", m:text("a " .. PEM .. " b"))
    assert.are.equal("line: ***", m:text("line: MIIBOgIBAAJBAKj34GkxFhD90vcN"))
    for k = 0, 2 do
      local b64 = core.b64encode(("x"):rep(k) .. TOKEN .. "yz")
      assert.is_nil(m:text(b64):find(core.b64encode(TOKEN):sub(5, 16), 1, true), b64)
      assert.truthy(m:text(b64):find("***", 1, true), b64)
    end
    assert.are.equal('{"v":"***"}', m:text(require("cjson").encode { v = TOKEN }))
    assert.are.equal("<p>***</p>", m:text("<p>" .. require("smol.workflow.text").xml_escape(TOKEN) .. "</p>"))
    assert.are.equal("--- ---", mask.new { "-----" }:text("--- ---"), "short lines of a value stay")
  end)

  it("masks a secret split between stream chunks, whatever the cut", function()
    local m = mask.new { TOKEN }
    local whole = "before " .. TOKEN .. " middle " .. TOKEN .. TOKEN .. " end"
    for size = 1, 9 do
      local s, out = m:stream(), {}
      for i = 1, #whole, size do out[#out + 1] = s:feed(whole:sub(i, i + size - 1)) end
      out[#out + 1] = s:flush()
      assert.are.equal("before *** middle ****** end", table.concat(out), "chunks of " .. size)
    end
  end)
end)
