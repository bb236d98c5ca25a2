-- km.strict — raise on reading or writing an undeclared global (rxi/lite's strict.lua).
-- `require "km.strict"` once; globals that exist at that moment stay usable.
local mt = getmetatable(_G) or {}
setmetatable(_G, mt)
local declared = {}
mt.__newindex = function(t, k, v)
  if not declared[k] then
    local w = debug.getinfo(2, "S").what
    if w ~= "main" and w ~= "C" then
      error("assignment to undeclared global '" .. tostring(k) .. "'", 2)
    end
    declared[k] = true
  end
  rawset(t, k, v)
end
mt.__index = function(_, k)
  if not declared[k] and debug.getinfo(2, "S").what ~= "C" then
    error("undeclared global '" .. tostring(k) .. "'", 2)
  end
  return nil
end
return true
