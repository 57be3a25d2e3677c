-- smol.shell: the one shell quoter, for the few places where a command
-- line is shown to a person or handed to /bin/sh (a golden file's diff).
local M = {}

--- word as one shell word: as it is when it needs no quoting, else in
-- single quotes (a ' inside becomes '\'').
function M.quote(word)
  if word:match("^[%w%./_:=@%%+,-]+$") then return word end
  return "'" .. word:gsub("'", [['\'']]) .. "'"
end

return M
