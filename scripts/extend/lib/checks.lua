-- A user's own module extending the workflow engine: step builders that a
-- team shares between workflows. Found through `--path scripts/extend/lib`
-- or SMOLWF_PATH=scripts/extend/lib.
local M = {}

-- A step that fails unless every listed file exists in the sandbox.
function M.files_exist(name, paths, extra)
  local step = { name = name, run = function(ctx)
    local missing = {}
    for _, path in ipairs(paths) do
      local r = ctx:exec { "test", "-e", path }
      if r.exit_code ~= 0 then missing[#missing + 1] = path end
    end
    if #missing > 0 then error("missing files: " .. table.concat(missing, ", "), 0) end
    ctx.log("all", #paths, "files present")
  end }
  for k, v in pairs(extra or {}) do step[k] = v end
  return step
end

-- A step running one shell command per matrix value of `var`.
function M.each(name, var, values, command, extra)
  local step = { name = name, matrix = { [var] = values }, run = function(ctx)
    ctx:sh((command:gsub("{" .. var .. "}", tostring(ctx.matrix[var]))))
  end }
  for k, v in pairs(extra or {}) do step[k] = v end
  return step
end

return M
