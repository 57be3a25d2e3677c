--[[
The step cache on disk: content-addressed entries, each a step's outputs
(files copied out of its session) and its return value, under the key of
smol.workflow.cache_key.

  ROOT/CACHEDIR.TAG                 the directory is a cache (backups and the
                                    workspace copy skip it)
  ROOT/index/KK/STATIC.json         the results stored under a static key:
                                    [{key, dynamic = {part = digest}}],
                                    most recent first
  ROOT/entries/KK/KEY/manifest.json parts, dynamic parts, files, size, when made
  ROOT/entries/KK/KEY/value.lua     the return value (smol.workflow.luavalue)
  ROOT/entries/KK/KEY/outputs/...   the output files, by their session path
  ROOT/steps/ID.json                the parts of a step's last stored key,
                                    for --explain (ID: a digest of the
                                    workflow's name and the instance id)
  ROOT/tmp/                         entries being written

An entry is written under tmp/ and renamed into place whole, so a reader
(another run sharing the cache) never sees half of one. Its `used` file
holds the time of its last use (to the microsecond; file times have only
seconds here): eviction removes the least recently used entries until
the cache is under its size cap.
]]
local lfs = require "lfs"
local cjson = require "cjson"
local core = require "smol.core"
local fs = require "smol.fs"
local files = require "smol.workflow.files"
local glob = require "smol.workflow.glob"
local luavalue = require "smol.workflow.luavalue"

local M = {}

M.DEFAULT_DIR = ".smolwf/cache"
M.DEFAULT_CAP = 2 * 1024 ^ 3


-- Big outputs move into a session in pieces of this size (fs_extra's append).
local CHUNK = 4 * 1024 * 1024

local json = cjson.new()

local Cache = {}
Cache.__index = Cache

function M.open(root)
  return setmetatable({ root = root }, Cache)
end

function Cache:entry_dir(key)
  return ("%s/entries/%s/%s"):format(self.root, key:sub(1, 2), key)
end

-- Makes the directories a store needs, the tag first.
function Cache:prepare()
  if self.prepared then return end
  fs.mkdir_p(self.root .. "/tmp")
  fs.mkdir_p(self.root .. "/steps")
  require("smol.workflow.runs").tag(self.root, "the step cache")
  self.prepared = true
end

local function read_json(path)
  local text = fs.try_read_file(path)
  if not text then return nil end
  local ok, v = pcall(json.decode, text)
  return ok and type(v) == "table" and v or nil
end

--- The manifest of the entry for `key`, or nil when there is none.
function Cache:lookup(key)
  local manifest = read_json(self:entry_dir(key) .. "/manifest.json")
  if manifest and manifest.key == key then return manifest end
end

local function write_used(dir)
  fs.write_file(dir .. "/used", string.format("%.6f\n", core.time()))
end

--- Marks an entry used now (the LRU order).
function Cache:touch(key)
  pcall(write_used, self:entry_dir(key))
end

-- ===== Restoring ============================================================

local function has_fs_extra(session)
  return type(session.capabilities) == "table" and session.capabilities.fs_extra
end

-- Writes a host file into the session, in pieces when it is big.
local function put_file(session, host_path, path, mode)
  local f = assert(io.open(host_path, "rb"))
  local extra = has_fs_extra(session)
  local first, ok, err = true, true, nil
  repeat
    local data = f:read(extra and CHUNK or "a") or ""
    if first or #data > 0 then
      ok, err = pcall(session.write_file, session, path, data,
        extra and { append = not first or nil, mode = first and mode or nil } or nil)
    end
    first = false
  until not ok or not extra or #data < CHUNK
  f:close()
  if not ok then error(err, 0) end
end

local function parent_of(path)
  return path:match("^(.*)/[^/]*$")
end

-- The mode a file write_file creates has anyway: giving it costs nothing
-- but saying it is a slower request.
local DEFAULT_MODE = 420   -- 0644

--[[
Puts the entry's outputs back into the session (directories, then files
with their modes) and returns the step's return value. `made` (a set of
directories known to exist in this session, kept by the caller across
restores) saves asking for them again.
]]
function Cache:restore(manifest, session, made)
  local dir = self:entry_dir(manifest.key)
  made = made or {}
  local function make_dir(d)
    if d and d ~= "" and d ~= "." and not made[d] then session:create_dir_all(d); made[d] = true end
  end
  for _, d in ipairs(manifest.dirs or {}) do make_dir(d) end
  for _, file in ipairs(manifest.files or {}) do
    make_dir(parent_of(file.path))
    local mode = math.tointeger(file.mode)
    put_file(session, dir .. "/outputs/" .. file.path, file.path, mode ~= DEFAULT_MODE and mode or nil)
  end
  local text = fs.read_file(dir .. "/value.lua")
  return luavalue.decode(text)
end

-- ===== Storing ==============================================================

local PERMISSION_BITS = { 256, 128, 64, 32, 16, 8, 4, 2, 1 }

local function mode_of(path)
  local perms = lfs.attributes(path, "permissions") or ""
  local mode = 0
  for i = 1, 9 do if perms:sub(i, i) ~= "-" then mode = mode | PERMISSION_BITS[i] end end
  return mode
end

-- The files and directories under `root` (relative), and their total size.
local function inventory(root, rel, out)
  local dir = rel == "" and root or root .. "/" .. rel
  for name in lfs.dir(dir) do
    if name ~= "." and name ~= ".." then
      local path = rel == "" and name or rel .. "/" .. name
      local attrs = lfs.attributes(root .. "/" .. path)
      if attrs.mode == "directory" then
        out.dirs[#out.dirs + 1] = path
        inventory(root, path, out)
      else
        out.files[#out.files + 1] = { path = path, size = attrs.size, mode = mode_of(root .. "/" .. path) }
        out.size = out.size + attrs.size
      end
    end
  end
  return out
end

local function unique_tmp(root)
  return assert(core.mkdtemp(root .. "/tmp/entry-XXXXXX"))
end

--[[
Stores an entry: the session paths `outputs` names (smol.workflow.glob
patterns) copied out, the return value's text `value_text`, and the
manifest fields `info` (parts, dynamic, step, workflow). A literal output
that does not exist is an error naming it. Returns the entry's size.
]]
function Cache:store(key, info, session, outputs, value_text)
  self:prepare()
  local staging = unique_tmp(self.root)
  local ok, result = pcall(function()
    local found = #outputs > 0 and glob.session_paths(session, outputs) or { paths = {}, missing = {} }
    if #found.missing > 0 then
      error(setmetatable({ code = "missing_output", message = ("the declared output `%s` is not there after the step succeeded")
        :format(found.missing[1]) }, { __tostring = function(e) return e.message end }), 0)
    end
    fs.mkdir_p(staging .. "/outputs")
    for _, path in ipairs(found.paths) do
      files.check_relative(path)
      files.copy_out(session, path, staging .. "/outputs/" .. path)
    end
    fs.write_file(staging .. "/value.lua", value_text)
    local inv = inventory(staging .. "/outputs", "", { files = {}, dirs = {}, size = 0 })
    local manifest = { key = key, parts = info.parts, dynamic = info.dynamic, step = info.step,
      workflow = info.workflow, created_at = core.time(), files = inv.files, dirs = inv.dirs,
      size = inv.size + #value_text }
    fs.write_file(staging .. "/manifest.json", json.encode(manifest))
    write_used(staging)
    return manifest.size
  end)
  if ok then
    local committed, err = pcall(self.commit, self, key, staging)
    if not committed then ok, result = false, err end
  end
  if not ok then pcall(fs.remove_tree, staging); error(result, 0) end
  return result
end

-- Renames the staged entry into place; an entry already there (another
-- run stored the same key) is kept, and ours dropped.
function Cache:commit(key, staging)
  local dest = self:entry_dir(key)
  fs.mkdir_p(parent_of(dest))
  if lfs.attributes(dest, "mode") then fs.remove_tree(staging); return end
  local moved, err = os.rename(staging, dest)
  if not moved and not lfs.attributes(dest, "mode") then error(("cannot store the cache entry `%s`: %s"):format(dest, err), 0) end
  if not moved then fs.remove_tree(staging) end
end

-- ===== Results under a static key ==========================================

function Cache:index_file(static_key)
  return ("%s/index/%s/%s.json"):format(self.root, static_key:sub(1, 2), static_key)
end

--- The results stored under `static_key`: {{key, dynamic}}, most recent first.
function Cache:variants(static_key)
  return read_json(self:index_file(static_key)) or {}
end

-- Results kept per static key: a step whose parameters take turns
-- (debug, release) finds each of them.
local MAX_VARIANTS = 16

--- Records a result under its static key (first: the most recent).
function Cache:add_variant(static_key, variant)
  self:prepare()
  local list = { variant }
  for _, v in ipairs(self:variants(static_key)) do
    if v.key ~= variant.key and #list < MAX_VARIANTS then list[#list + 1] = v end
  end
  local path = self:index_file(static_key)
  fs.mkdir_p(parent_of(path))
  local tmp = path .. "." .. core.sha256(tostring(core.now())):sub(1, 8) .. ".tmp"
  fs.write_file(tmp, json.encode(list))
  os.rename(tmp, path)
end

-- ===== The last key of each step, for --explain =============================

function Cache:step_file(workflow, id)
  return ("%s/steps/%s.json"):format(self.root, core.sha256(tostring(workflow), "\0", id))
end

--- What was recorded for the step when its result was last stored: {key, parts, dynamic}.
function Cache:last(workflow, id)
  return read_json(self:step_file(workflow, id))
end

function Cache:set_last(workflow, id, record)
  self:prepare()
  local path = self:step_file(workflow, id)
  fs.write_file(path .. ".tmp", json.encode(record))
  os.rename(path .. ".tmp", path)
end

-- ===== Eviction =============================================================

local function each_entry(root, fn)
  local base = root .. "/entries"
  if lfs.attributes(base, "mode") ~= "directory" then return end
  for kk in lfs.dir(base) do
    if kk ~= "." and kk ~= ".." then
      for key in lfs.dir(base .. "/" .. kk) do
        if key ~= "." and key ~= ".." then fn(key, base .. "/" .. kk .. "/" .. key) end
      end
    end
  end
end

--[[
Removes the least recently used entries until the cache holds at most
`cap` bytes; the entries in `keep` (used by this run) stay even so.
Returns the number removed and the bytes they held.
]]
function Cache:evict(cap, keep)
  local entries, total = {}, 0
  each_entry(self.root, function(key, dir)
    local manifest = read_json(dir .. "/manifest.json")
    local size = manifest and tonumber(manifest.size) or 0
    entries[#entries + 1] = { key = key, dir = dir, size = size,
      used = tonumber(fs.try_read_file(dir .. "/used") or "") or 0 }
    total = total + size
  end)
  table.sort(entries, function(a, b) return a.used < b.used end)
  local removed, freed = 0, 0
  for _, e in ipairs(entries) do
    if total <= cap then break end
    if not (keep and keep[e.key]) then
      fs.remove_tree(e.dir)
      total, removed, freed = total - e.size, removed + 1, freed + e.size
    end
  end
  return removed, freed
end

return M
