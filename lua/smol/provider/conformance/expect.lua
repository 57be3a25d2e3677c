-- What a check expected and what came back, as short readable text.
--
-- A check function returns `ok, expected, got` (strings); these helpers
-- build those triples from the provider's replies so every check line says
-- the same kind of thing the same way.
local cjson = require "cjson"

local expect = {}

local SHOW_MAX = 120

-- Printable form of a string: escapes bytes a terminal would mangle.
local function quote(s)
  local body = s:sub(1, SHOW_MAX):gsub("[%c\128-\255\\\"]", function(c)
    if c == "\n" then return "\\n" end
    if c == "\\" or c == '"' then return "\\" .. c end
    return string.format("\\x%02x", c:byte())
  end)
  if #s > SHOW_MAX then body = body .. string.format("...(%d bytes)", #s) end
  return '"' .. body .. '"'
end

-- Integral floats (lua-cjson decodes every number as a float) print as integers.
local function number_text(n)
  local i = math.tointeger(n)
  return tostring(i or n)
end

function expect.show(v)
  local t = type(v)
  if t == "string" then return quote(v) end
  if t == "number" then return number_text(v) end
  if v == cjson.null then return "null" end
  if t == "table" then
    local ok, text = pcall(cjson.encode, v)
    text = ok and text or tostring(v)
    if #text > SHOW_MAX then text = text:sub(1, SHOW_MAX) .. "..." end
    return text
  end
  return tostring(v)
end

-- What a request record came to: "result {...}", "error CODE: message", "no reply (...)".
function expect.reply(req)
  if req.lost then return "no reply (" .. req.lost .. ")" end
  if not req.done then
    return "no reply" .. (req.waited and string.format(" within %gs", req.waited) or " yet")
  end
  if req.error ~= nil then
    local e = req.error
    if type(e) ~= "table" then return "error " .. expect.show(e) end
    return string.format("error %s: %s", tostring(e.code), tostring(e.message))
  end
  return "result " .. expect.show(req.result)
end

function expect.is_result(req)
  return req.done and not req.lost and req.error == nil and type(req.result) == "table"
end

function expect.error_code(req)
  if req.lost or type(req.error) ~= "table" then return nil end
  return req.error.code
end

-- ok when req answered a result object.
function expect.result(req, what)
  return expect.is_result(req), what or "a result", expect.reply(req)
end

-- ok when req answered an error with `code`.
function expect.error(req, code)
  return expect.error_code(req) == code, "error " .. code, expect.reply(req)
end

-- ok when a == b (compared as Lua values; numbers by value).
function expect.equal(expected, got, what)
  local label = what and (what .. " ") or ""
  return expected == got, label .. expect.show(expected), label .. expect.show(got)
end

--[[
Runs sub-cases {label, fn} where fn returns ok, expected, got; passes when
all pass. The first failures are named in `got`, so one aggregated check
line still says which case broke.
]]
function expect.all(expected, cases)
  local bad = {}
  for _, case in ipairs(cases) do
    local ok, exp, got = case[2]()
    if not ok then
      bad[#bad + 1] = string.format("%s: expected %s, got %s", case[1], exp, got)
    end
  end
  if #bad == 0 then return true, expected, "all " .. #cases .. " cases as expected" end
  return false, expected, table.concat(bad, "; ")
end

return expect
