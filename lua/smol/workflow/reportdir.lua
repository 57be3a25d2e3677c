-- Files in a run's report directory, on the host's own file system (not in
-- a sandbox): make directories, write a report atomically, read a log's tail.
-- Failures raise an error naming the path and the reason.
local lfs = require "lfs"
local fs = require "smol.fs"

local M = {}

local function fail(what, path, err)
  error(string.format("report: cannot %s `%s`: %s", what, path, err), 0)
end

--- Creates path and its missing parents (like mkdir -p).
function M.ensure_dir(path)
  local ok, err = pcall(fs.mkdir_p, path)
  if not ok then error("report: " .. tostring(err), 0) end
end

--- Joins the report directory and a relative path.
function M.join(dir, rel)
  return (dir:gsub("/+$", "")) .. "/" .. rel
end

--- Writes text to path through a temporary file and a rename, so a reader
--- (or a Ctrl-C in the middle) never sees half a report.
function M.write_atomic(path, text)
  local tmp = path .. ".tmp"
  local written, err = pcall(fs.write_file, tmp, text)
  if not written then os.remove(tmp); error("report: " .. tostring(err), 0) end
  local renamed, rerr = os.rename(tmp, path)
  if not renamed then os.remove(tmp); fail("rename into place", path, rerr) end
end

--- Writes one report file, run.report_dir/NAME, atomically, with the
--- secrets `masker` knows (smol.workflow.mask) hidden; returns its path.
function M.write_report(run, name, text, masker)
  if masker then text = masker:text(text) end
  M.ensure_dir(run.report_dir)
  local path = M.join(run.report_dir, name)
  M.write_atomic(path, text)
  return path
end

--- The last max_bytes of the file (all of it when smaller), and whether it
--- was cut; nil when the file does not exist (a step that never ran).
function M.read_tail(path, max_bytes)
  local f = io.open(path, "rb")
  if not f then return nil end
  local size = f:seek("end")
  local cut = size > max_bytes
  f:seek("set", cut and size - max_bytes or 0)
  local data = f:read("a") or ""
  f:close()
  if cut then
    -- Start at a line boundary so the first line shown is not half a line.
    local nl = data:find("\n", 1, true)
    if nl and nl < #data then data = data:sub(nl + 1) end
  end
  return data, cut
end

--- Whether a file exists at path.
function M.exists(path)
  return lfs.attributes(path, "mode") ~= nil
end

return M
