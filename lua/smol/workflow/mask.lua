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

--[[
How common each byte is in what commands print, most common first. Most
of the cost of masking is looking for each form in every chunk of output;
a form with a byte the chunk does not have cannot be in it (finding that
out is one memchr, stopping at the first occurrence), and a form is
looked for by its rarest byte, where memchr stops least often.
]]
local COMMON = " etaoinsrhldcumfpgwybvkxjqz\n.-_/=:,0123456789()ETAOINSRHLDCUMFPGWYBVKXJQZ\"'[]{}<>;+*#@!?%&|^~`$\\\t"
local RANK = {}
for i = 1, #COMMON do RANK[COMMON:byte(i)] = i end

local function rarity(b)
  return RANK[b] or 256
end

-- The form's distinct bytes, rarest first.
local function distinct_bytes(form)
  local bytes, seen = {}, {}
  for i = 1, #form do
    local b = form:byte(i)
    if not seen[b] then seen[b], bytes[#bytes + 1] = true, b end
  end
  table.sort(bytes, function(a, b) return rarity(a) > rarity(b) end)
  return bytes
end

-- Bytes at least this rare (upper case, digits, punctuation) are worth
-- sharing as the first byte looked for.
local RARE = RANK[("0"):byte()]

--[[
Which byte each form's search starts with: a byte the chunk lacks rules
out every form that has it, for the price of one scan, so the forms
share as few first bytes as they can (greedy set cover over their rare
bytes; a form with none starts with its rarest byte).
]]
local function shared_first_bytes(all)
  local first, left = {}, #all
  while left > 0 do
    local count = {}
    for i, bytes in ipairs(all) do
      if not first[i] then
        for _, b in ipairs(bytes) do if rarity(b) >= RARE then count[b] = (count[b] or 0) + 1 end end
      end
    end
    local best, best_n = nil, 0
    for b, n in pairs(count) do
      if n > best_n or (n == best_n and rarity(b) > rarity(best)) then best, best_n = b, n end
    end
    for i, bytes in ipairs(all) do
      if not first[i] then
        local has = false
        for _, b in ipairs(bytes) do has = has or b == best end
        if has or not best then first[i], left = best and has and best or bytes[1], left - 1 end
      end
    end
  end
  return first
end

-- The search plan of a form: the bytes to check (`first` first, then the
-- rest rarest first) and where its rarest byte is (the form is looked for
-- from there: memchr stops least often on it).
local function search_plan(form, bytes, first)
  local chars = { string.char(first) }
  for _, b in ipairs(bytes) do if b ~= first then chars[#chars + 1] = string.char(b) end end
  local anchor = form:find(string.char(bytes[1]), 1, true)
  return { chars = chars, anchor = anchor, tail = form:sub(anchor) }
end

--- A masker for the secret values (strings of MIN_BYTES or more).
function M.new(values)
  local forms, seen = {}, {}
  for _, v in ipairs(values or {}) do forms_of(v, forms, seen) end
  -- Longest first: a line of a value is part of the whole value.
  table.sort(forms, function(a, b) return #a > #b end)
  local bytes = {}
  for i, f in ipairs(forms) do bytes[i] = distinct_bytes(f) end
  local first = shared_first_bytes(bytes)
  local patterns, plans, longest, starts = {}, {}, 0, {}
  for i, f in ipairs(forms) do
    patterns[i], plans[i] = f:gsub("%W", "%%%0"), search_plan(f, bytes[i], first[i])
    longest = math.max(longest, #f)
    local c = f:sub(1, 1)
    starts[c] = starts[c] or {}
    table.insert(starts[c], f)
  end
  return setmetatable({ forms = forms, patterns = patterns, plans = plans, longest = longest,
    starts = starts }, Masker)
end

-- Whether s holds `form` (plan: its search plan; present: which bytes s
-- has, found out as needed, shared by the forms).
local function contains(s, form, plan, present)
  for _, c in ipairs(plan.chars) do
    local has = present[c]
    if has == nil then has = s:find(c, 1, true) ~= nil; present[c] = has end
    if not has then return false end
  end
  local tail, k, init = plan.tail, plan.anchor, plan.anchor
  while true do
    local at = s:find(tail, init, true)
    if not at then return false end
    if k == 1 or s:sub(at - k + 1, at - 1) == form:sub(1, k - 1) then return true end
    init = at + 1
  end
end

function Masker:empty()
  return #self.forms == 0
end

--- s with every form of every secret replaced.
function Masker:text(s)
  if type(s) ~= "string" or #self.forms == 0 then return s end
  local present = {}
  for i, form in ipairs(self.forms) do
    if contains(s, form, self.plans[i], present) then
      s = s:gsub(self.patterns[i], M.REPLACEMENT)
      present = {}
    end
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

-- Where buf's end may be the start of a form the next chunk completes:
-- the first position whose rest is a proper prefix of a form (#buf + 1
-- when there is none, which is the common case: nothing is held back).
local function hold_from(m, buf)
  local from, best = math.max(1, #buf - m.longest + 2), #buf + 1
  for c, forms in pairs(m.starts) do
    local q = buf:find(c, from, true)
    while q and q < best do
      local rest = buf:sub(q)
      for _, form in ipairs(forms) do
        if #form > #rest and form:sub(1, #rest) == rest then best = q; break end
      end
      q = buf:find(c, q + 1, true)
    end
  end
  return best
end

local Stream = {}
Stream.__index = Stream

--- The masked text of `chunk` that can be let out now. An end that may be
--- the start of a secret the next chunk completes is held back (less than
--- the longest form), until the next feed or flush.
function Stream:feed(chunk)
  local m = self.masker
  local buf = self.held == "" and chunk or self.held .. chunk
  local p = hold_from(m, buf)
  -- A form that starts before p and ends after it goes with the held part.
  if p <= #buf then p = safe_cut(m, buf, p - 1) + 1 end
  self.held = p <= #buf and buf:sub(p) or ""
  if p == 1 then return "" end
  return m:text(p > #buf and buf or buf:sub(1, p - 1))
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
