--[[
Masking secrets in text that leaves the host (the terminal, logs, reports,
--json events): every occurrence of a secret becomes "***", and so does
every form in which a secret commonly shows up in output:

  - the value itself, and each line of a multi-line value (lines shorter
    than MIN_BYTES are left alone: they would mask every "}" or "ab");
  - its JSON-escaped form (as in report.json: quotes, backslashes, control
    bytes, "/" as "\/" or "/");
  - its XML/HTML-escaped form (as in junit.xml and report.html);
  - its base64 at each of the 3 alignments it can have inside a longer
    base64 text ("user:TOKEN" in an Authorization header), standard and
    URL-safe: the characters that depend on the bytes around it are left
    out, so a match is found wherever the value sits.

  local m = mask.new{"s3cr3t-value"}
  m:text("token=s3cr3t-value")     --> "token=***"
  local s = m:stream()             -- chunks that may split a secret
  out(s:feed(chunk)) ... out(s:flush())
]]
local core = require "smol.core"
local cjson = require "cjson"

local M = {}

M.MIN_BYTES = 4
M.REPLACEMENT = "***"

local B64_URL = { ["+"] = "-", ["/"] = "_" }

-- The base64 characters of `value` placed after `k` unknown bytes that do
-- not depend on those bytes, nor on the bytes after it.
local function base64_core(value, k)
  local encoded = core.b64encode(("\0"):rep(k) .. value .. "\0\0")
  local first = (8 * k + 5) // 6                  -- ceil(8k / 6)
  local last = (8 * (k + #value)) // 6 - 1        -- floor((8k + 8n) / 6) - 1
  return encoded:sub(first + 1, last + 1)
end

local function xml_escaped(value)
  return (value:gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
    ['"'] = "&quot;", ["'"] = "&#39;" }))
end

local function add_form(forms, seen, form)
  if #form >= M.MIN_BYTES and not seen[form] then seen[form], forms[#forms + 1] = true, form end
end

local function forms_of(value, forms, seen)
  add_form(forms, seen, value)
  for line in value:gmatch("[^\r\n]+") do add_form(forms, seen, line) end
  local json = cjson.encode(value):sub(2, -2)
  add_form(forms, seen, json)
  add_form(forms, seen, (json:gsub("\\/", "/")))
  add_form(forms, seen, xml_escaped(value))
  for k = 0, 2 do
    local b64 = base64_core(value, k)
    add_form(forms, seen, b64)
    add_form(forms, seen, (b64:gsub("[+/]", B64_URL)))
  end
end

local Masker = {}
Masker.__index = Masker

--- A masker for the secret values (strings of MIN_BYTES or more).
function M.new(values)
  local forms, seen = {}, {}
  for _, v in ipairs(values or {}) do forms_of(v, forms, seen) end
  -- Longest first: a line of a value is part of the whole value.
  table.sort(forms, function(a, b) return #a > #b end)
  local patterns, longest = {}, 0
  for i, f in ipairs(forms) do
    patterns[i] = f:gsub("%W", "%%%0")
    longest = math.max(longest, #f)
  end
  return setmetatable({ forms = forms, patterns = patterns, longest = longest }, Masker)
end

function Masker:empty()
  return #self.forms == 0
end

--- s with every form of every secret replaced.
function Masker:text(s)
  if type(s) ~= "string" or #self.forms == 0 then return s end
  for i, form in ipairs(self.forms) do
    if s:find(form, 1, true) then s = s:gsub(self.patterns[i], M.REPLACEMENT) end
  end
  return s
end

--- v with every string in it masked (keys too), tables copied; for values
--- written into reports.
function Masker:value(v, depth)
  if type(v) == "string" then return self:text(v) end
  if type(v) ~= "table" or #self.forms == 0 or (depth or 0) > 32 or getmetatable(v) then return v end
  local out = {}
  for k, x in pairs(v) do out[self:value(k, (depth or 0) + 1)] = self:value(x, (depth or 0) + 1) end
  return out
end

-- Where a chunk may be cut so that no form straddles the cut: `cut`, or
-- the start of a form that begins before it and ends after it.
local function safe_cut(self, buf, cut)
  repeat
    local moved = false
    for _, form in ipairs(self.forms) do
      local at = cut > 0 and buf:find(form, math.max(1, cut - #form + 2), true)
      if at and at <= cut then cut, moved = at - 1, true end
    end
  until not moved
  return cut
end

local Stream = {}
Stream.__index = Stream

--- The masked text of `chunk` that can be let out now; up to the longest
--- form's length less one byte is held back (it may be the start of a
--- secret the next chunk ends), until the next feed or flush.
function Stream:feed(chunk)
  local m = self.masker
  local buf = self.held .. chunk
  local cut = safe_cut(m, buf, math.max(0, #buf - (m.longest - 1)))
  self.held = buf:sub(cut + 1)
  if cut <= 0 then return "" end
  return m:text(cut == #buf and buf or buf:sub(1, cut))
end

--- The masked rest of the stream.
function Stream:flush()
  local rest = self.held
  self.held = ""
  return self.masker:text(rest)
end

function Masker:stream()
  return setmetatable({ masker = self, held = "" }, Stream)
end

return M
