-- bench/lib.lua — what the bench scripts share: a report printed line by line and also
-- written to a file, that file's writing, and a scratch folder for a pass's caches.
--
--   local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")  -- beside the script
--   local say, save = B.report(args.out)
--   say("| %s | %d |", name, n); ...; save()   -- the lines to args.out (nothing where nil)
local fmt, concat = string.format, table.concat

local M = {}

-- text and a newline written to path; nothing where path is nil
function M.write_out(path, text)
  if not path then return end
  local f = assert(io.open(path, "w"))
  f:write(text, "\n")
  f:close()
end

-- -> say(format, ...) (prints a line and keeps it), save() (the kept lines to path)
function M.report(path)
  local lines = {}
  local function say(f, ...)
    local s = fmt(f, ...)
    print(s)
    lines[#lines + 1] = s
  end
  return say, function() M.write_out(path, concat(lines, "\n")) end
end

-- A fresh folder with cache/ and tmp/ in it (a pass's XDG_CACHE_HOME and TMPDIR). -> path
function M.scratch()
  local tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir -p " .. tmp .. "/cache " .. tmp .. "/tmp"))
  return tmp
end

return M
