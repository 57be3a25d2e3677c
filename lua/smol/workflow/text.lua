-- Text helpers shared by the progress view and the report writers: how a
-- status, a duration or a piece of step output is shown to a person.
-- Pure functions over strings; no I/O.
local M = {}

-- Marks and words for each instance status (the data model's statuses).
M.marks = {
  pending = "·", queued = "·", running = "▶", success = "✓", failed = "✗",
  skipped = "↷", cancelled = "⊘", timed_out = "⏱",
}
M.words = {
  pending = "pending", queued = "queued", running = "running", success = "ok",
  failed = "failed", skipped = "skipped", cancelled = "cancelled", timed_out = "timed out",
}
-- SGR colour per status for terminals (green, red, yellow, dim...).
M.sgr = {
  success = "32", failed = "31", timed_out = "31", skipped = "33",
  cancelled = "35", running = "36", queued = "2", pending = "2",
}

function M.mark(status) return M.marks[status] or "?" end
function M.word(status) return M.words[status] or tostring(status) end

--- Wraps s in the SGR code for status when colour is on.
function M.paint(s, code, color)
  if not color or not code then return s end
  return "\27[" .. code .. "m" .. s .. "\27[0m"
end

--- "850ms", "12.3s", "2m05s", "1h02m"; "-" when unknown.
function M.duration(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds then return "-" end
  if seconds < 0 then seconds = 0 end
  if seconds < 1 then return string.format("%dms", math.floor(seconds * 1000 + 0.5)) end
  if seconds < 60 then return string.format("%.1fs", seconds) end
  local s = math.floor(seconds + 0.5)
  if s < 3600 then return string.format("%dm%02ds", s // 60, s % 60) end
  return string.format("%dh%02dm", s // 3600, (s % 3600) // 60)
end

--- s with every invalid UTF-8 byte replaced by U+FFFD, so XML/HTML/terminals accept it.
--- (In C: binary output is invalid every few bytes, too slow to repair in Lua.)
M.valid_utf8 = require("smol.core").valid_utf8

--- Removes ANSI escape sequences (colours, cursor moves) a program wrote.
function M.strip_ansi(s)
  if not s:find("\27", 1, true) then return s end   -- the common case, at memchr speed
  s = s:gsub("\27%[[0-?]*[ -/]*[@-~]", "")      -- CSI: colours, cursor moves
  s = s:gsub("\27%][^\7\27]*\7", "")             -- OSC ending in BEL (titles, links)
  s = s:gsub("\27%][^\7\27]*\27\\", "")          -- OSC ending in ST
  return (s:gsub("\27[@-_]", ""))                 -- any other two-byte escape
end

-- The cleaning below is one pass in C (core.clean_text): a step's binary
-- output needs it every few bytes, which gsub passes did at a few MB/s.
local clean_text = require("smol.core").clean_text

--- One line safe to print inside our own terminal layout: valid UTF-8,
--- no escapes, no control characters (a stray \r or \27 would wreck the
--- live view); a tab becomes two spaces.
function M.terminal_line(s)
  return clean_text(s, "line")
end

--- terminal_line for many lines at once: the same cleaning, newlines kept.
--- One pass over a whole chunk instead of one per line, which is what
--- keeps a step printing millions of short lines fast.
function M.terminal_lines(s)
  return clean_text(s, "lines")
end

--- The text of a log for XML/HTML: valid UTF-8, no escapes, and none of the
--- control characters XML 1.0 forbids (tab, newline and CR stay).
function M.printable(s)
  return clean_text(s, "xml")
end

local XML_ENTITIES = {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
                      ["'"] = "&#39;", ["\n"] = "&#10;", ["\r"] = "&#13;", ["\t"] = "&#9;"}

--- s made printable and escaped for XML/HTML text; with `attribute` true,
--- also for a quoted attribute value (where a raw newline would be folded).
function M.xml_escape(s, attribute)
  s = M.printable(tostring(s))
  if attribute then return (s:gsub("[&<>\"'\n\r\t]", XML_ENTITIES)) end
  return (s:gsub("[&<>]", XML_ENTITIES))
end

--- The first `width` characters (code points) of a valid UTF-8 string,
--- with "…" as the last one when it was cut.
function M.truncate(s, width)
  if width <= 0 then return "" end
  local n = utf8.len(s)
  if not n or n <= width then return s end
  local cut = utf8.offset(s, width)    -- start of the width-th character
  return s:sub(1, cut - 1) .. "…"
end

--- At most `width` characters of a valid UTF-8 string, cut in the middle
--- ("build-and-test-…-linux-arm64"): long names that share a prefix stay
--- told apart by their ends.
function M.truncate_middle(s, width)
  local n = utf8.len(s)
  if not n or n <= width then return s end
  if width < 5 then return M.truncate(s, width) end
  local head = (width - 1) // 2
  local tail = width - 1 - head
  return s:sub(1, utf8.offset(s, head + 1) - 1) .. "…" .. s:sub(utf8.offset(s, n - tail + 1))
end

--- The lines of a one-line, valid UTF-8 string wrapped to `width`
--- characters: at a space when there is one in the line, else cut.
function M.wrap(s, width)
  local lines = {}
  width = math.max(width, 1)
  while utf8.len(s) > width do
    local cut_end = utf8.offset(s, width + 1)           -- first byte past the width
    local space = s:sub(1, cut_end):match(".*() ")       -- last space that fits
    if space and space > 1 then
      lines[#lines + 1], s = s:sub(1, space - 1), s:sub(space + 1)
    else
      lines[#lines + 1], s = s:sub(1, cut_end - 1), s:sub(cut_end)
    end
  end
  lines[#lines + 1] = s
  return lines
end

--- Like truncate, for a line with SGR colour sequences: they do not count
--- toward the width, and a cut line ends with a colour reset.
function M.truncate_styled(s, width)
  if M.width(M.strip_ansi(s)) <= width then return s end
  local out, used, at = {}, 0, 1
  while at <= #s and used < width - 1 do
    local esc_end = s:match("^\27%[[0-9;]*m()", at)
    if esc_end then
      out[#out + 1], at = s:sub(at, esc_end - 1), esc_end
    else
      local next_at = utf8.offset(s, 2, at) or #s + 1
      out[#out + 1], at, used = s:sub(at, next_at - 1), next_at, used + 1
    end
  end
  return table.concat(out) .. "…\27[0m"
end

--- Display width in terminal columns (one per code point; good enough for
--- the Latin, box-drawing and symbol characters we print ourselves).
function M.width(s)
  return utf8.len(s) or #s
end

--- s padded with spaces on the right to `width` columns.
function M.pad(s, width)
  local w = M.width(s)
  if w >= width then return s end
  return s .. string.rep(" ", width - w)
end

--- The last `n` lines of s (a trailing newline does not count as an empty line).
function M.last_lines(s, n)
  local lines = {}
  for line in (s:gsub("\n$", "") .. "\n"):gmatch("(.-)\n") do
    lines[#lines + 1] = line
  end
  return table.concat(lines, "\n", math.max(1, #lines - n + 1), #lines)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "number" or type(a) == "string") then return a < b end
    return type(a) < type(b)
  end)
  return keys
end

local function is_sequence(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local SHOW_DEFAULTS = {entries = 4, depth = 2, string = 40}

--- A short rendering of a value for messages ("0", '"x"', "{shard = 3}"):
--- at most limits.entries entries per table, limits.depth levels, strings
--- cut at limits.string bytes (defaults 4, 2, 40).
function M.show(v, limits, depth)
  limits, depth = limits or SHOW_DEFAULTS, depth or 0
  if type(v) == "string" then
    local max = limits.string
    return ("%q"):format(#v > max and (v:sub(1, max - 3) .. "...") or v)
  end
  if type(v) ~= "table" then
    return (type(v) == "number" or type(v) == "boolean" or v == nil) and tostring(v) or type(v)
  end
  if next(v) == nil then return "{}" end
  if depth >= limits.depth then return "{...}" end
  local parts, list = {}, is_sequence(v)
  for i, k in ipairs(sorted_keys(v)) do
    if i > limits.entries then parts[#parts + 1] = "..."; break end
    local item = M.show(v[k], limits, depth + 1)
    parts[#parts + 1] = list and item or (("%s = %s"):format(tostring(k), item))
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local ERROR_LIMITS = {entries = 12, depth = 3, string = 400}

--- What to show under a failed instance, besides its note: for a replay
--- mismatch the rest of its message (the recorded and the actual request
--- side by side, every differing value whole), else the last `n` lines of
--- its stderr (see stderr_tail). Lines are safe for a terminal.
function M.failure_details(inst, n)
  if inst.error_code == "replay_mismatch" and inst.status == "failed" then
    local lines, first = {}, true
    for line in tostring(inst.error):gmatch("[^\n]+") do
      if not first then lines[#lines + 1] = M.terminal_line(line) end
      first = false
    end
    return lines
  end
  return M.stderr_tail(inst, n)
end

--- Whether s reads as binary rather than text: it has a NUL, or more than
--- one byte in 4 is invalid UTF-8 or a control byte text does not use
--- (tab, newline, CR, form feed, backspace and ESC it does).
function M.is_binary(s)
  if s:find("\0", 1, true) then return true end
  local invalid = (#M.valid_utf8(s) - #s) // 2   -- each invalid byte became 3 (U+FFFD)
  local _, controls = s:gsub("[\1-\7\11\14-\26\28-\31\127]", "")
  return (invalid + controls) * 4 > #s   -- random bytes: over half; Latin-1 text: a few in 100
end

--- What stands for binary output rather than its bytes: "(1234 bytes of binary output)".
function M.binary_summary(bytes)
  return ("(%d bytes of binary output)"):format(bytes)
end

--- The last `n` non-blank lines of a failed instance's stderr
--- (inst.stderr_tail), each made safe for a terminal; {} when it has none
--- or did not fail. Binary stderr is one line saying how much there was.
function M.stderr_tail(inst, n)
  if not (inst.status == "failed" or inst.status == "timed_out") or not inst.stderr_tail then return {} end
  if M.is_binary(inst.stderr_tail) then return { M.binary_summary(inst.stderr_bytes or #inst.stderr_tail) } end
  local lines = {}
  for line in inst.stderr_tail:gmatch("[^\r\n]+") do
    if line:find("%S") then lines[#lines + 1] = M.terminal_line(line) end
  end
  return table.move(lines, math.max(1, #lines - n + 1), #lines, 1, {})
end

--- The message of an error value: strings stay, tables use __tostring
--- (smol.errors) or else show their fields ("error {code = 7}"), so an
--- `error({code = 7})` never reads "table: 0x55e5...".
function M.message(err)
  if err == nil then return nil end
  local mt = getmetatable(err)
  if type(err) ~= "table" or (mt and mt.__tostring) then return tostring(err) end
  return "error " .. M.show(err, ERROR_LIMITS)
end

--- msg without a leading "<status>:" the engine may have put there
--- ("cancelled: step 'lint' failed"), since we show the status anyway.
function M.strip_status(status, msg)
  for _, prefix in ipairs({M.word(status), status}) do
    if msg:sub(1, #prefix + 1) == prefix .. ":" then return (msg:sub(#prefix + 2):gsub("^%s+", "")) end
  end
  return msg
end

--- A relative path as a URL path: bytes other than unreserved ones and
--- "/" percent-encoded, so "#", "?", "%" or a space in a step's name
--- cannot turn a link to its log or artifact into a fragment or a query.
function M.url_path(rel)
  return (tostring(rel):gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end

--- A sandbox session's description (the engine's inst.sandbox/run.sandbox:
--- profile, provider_profile, isolation, network) for people, worded as
--- `smolwf run` prints it: "auto/default (no isolation, network on)";
--- nil when there is none.
function M.sandbox_label(sb)
  if type(sb) ~= "table" then return nil end
  local profile = tostring(sb.profile or "?")
  if type(sb.provider_profile) == "string" and sb.provider_profile ~= profile then
    profile = profile .. " → " .. sb.provider_profile
  end
  local isolation = sb.isolation == "none" and "no isolation" or "isolation: " .. tostring(sb.isolation or "unknown")
  local network = sb.network == true and ", network on" or sb.network == false and ", no network" or ""
  return string.format("%s (%s%s)", profile, isolation, network)
end

--- "cached 38831d65ee3b" for an instance whose result came from the step
--- cache, "reused from RUN" for one a resumed run took over; nil otherwise.
function M.reuse_label(inst)
  if inst.resumed_from then return "reused from " .. tostring(inst.resumed_from) end
  if type(inst.cache) == "table" and inst.cache.status == "hit" then
    return "cached " .. tostring(inst.cache.key):sub(1, 12)
  end
end

--- Whether the instance ever started an attempt (a skipped or cancelled
--- one may not have: it has no duration worth showing).
function M.ran(inst)
  return inst.attempts ~= nil and #inst.attempts > 0
end

--- "812 B", "3.4 KiB", "64.0 MiB", "1.2 GiB".
function M.bytes(n)
  if n < 1024 then return string.format("%d B", n) end
  local units, i = {"KiB", "MiB", "GiB", "TiB"}, 0
  repeat n, i = n / 1024, i + 1 until n < 1024 or i == #units
  return string.format("%.1f %s", n, units[i])
end

--- "1 artifact", "3 artifacts".
function M.plural(n, noun)
  return n .. " " .. noun .. (n == 1 and "" or "s")
end

--- The label of an attempt count: "" for one, "2 attempts" otherwise.
function M.attempts_label(inst)
  local n = inst.attempts and #inst.attempts or 0
  if n <= 1 then return "" end
  return n .. " attempts"
end

return M
