-- The public module names (docs/strategies.md, "Module names"): a strategy or user script
-- that requires km.prompt, km.steps, ... by the names the docs showed before lua/km was laid
-- out in folders still gets the module, under kmrun, the C API and a stock lua5.4 that
-- required km; the table is runtime/glue/km_api.c's public_names, and nothing else in the
-- tree uses those names.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local ROOT, _, BUILD = testing.paths()

local read = testing.read

-- name -> module, read from the C table
local PUBLIC = {}
for name, module in read(ROOT .. "/runtime/glue/km_api.c"):gmatch('{"(km%.[%w_]+)", "(km%.[%w_.]+)"}') do
  PUBLIC[name] = module
end

t.test("the table names the public names the strategies and docs used", function()
  for _, name in ipairs { "km.prompt", "km.steps", "km.search", "km.context", "km.model", "km.guidance", "km.eval",
    "km.runner", "km.dataset", "km.dedup", "km.kernelbench" } do
    t.ok(PUBLIC[name], name .. " is not in public_names")
  end
end)

t.test("under kmrun each public name loads the module it names, the same table", function()
  for name, module in pairs(PUBLIC) do
    local ok, m = pcall(require, name)
    t.ok(ok, name .. ": " .. tostring(m))
    t.ok(ok and m == require(module), name .. " is " .. module)
  end
  local ok, err = pcall(require, "km.no_such_module")
  t.ok(not ok and tostring(err):find("no public name 'km.no_such_module'", 1, true), tostring(err))
end)

t.test("a file of a public name on KM_PATH comes before the table", function()
  local dir = testing.tmpdir()
  assert(sys.mkdir(dir .. "/km"))
  testing.write(dir .. "/km/prompt.lua", 'return "mine"\n')
  local out, rc = testing.sh("KM_PATH=" .. dir .. " " .. BUILD .. "/kmrun -e 'print((require \"km.prompt\"))'")
  t.eq(rc, 0, out)
  t.eq(out, "mine\n")
end)

local lua54 = testing.interpreter("lua5.4", BUILD)
if lua54 then
  t.test("under a stock lua5.4, after require \"km\", each public name loads its module", function()
    local lines = { "require 'km'" }
    for name, module in pairs(PUBLIC) do
      lines[#lines + 1] = ("assert(require(%q) == require(%q), %q)"):format(name, module, name)
    end
    lines[#lines + 1] = "print('ok')"
    local script = testing.tmpdir() .. "/public.lua"
    testing.write(script, table.concat(lines, "\n") .. "\n")
    local out, rc = testing.sh("cd / && LUA_CPATH='" .. BUILD .. "/lib/lua/?.so;;' LUA_PATH='" .. ROOT
      .. "/lua/?.lua;;' " .. lua54 .. " " .. script .. " 2>&1")
    t.eq(rc, 0, out)
    t.eq(out, "ok\n")
  end)
else
  t.skip("a stock lua5.4 with km.so", "no lua5.4 here (nor in " .. BUILD .. "/carry)")
end

t.test("the tree uses the new names: no require of a public name in lua/, strategies/, tests/, bench/, tools/, examples/, docs/", function()
  local found = {}
  local function scan(dir)
    for _, name in ipairs(sys.readdir(dir) or {}) do
      local p = dir .. "/" .. name
      if sys.readdir(p) then
        scan(p)
      elseif p:match("%.lua$") or p:match("%.md$") then
        local src = read(p)
        for old in pairs(PUBLIC) do
          local pat = "require%s*%(?%s*[\"']" .. old:gsub("%.", "%%.") .. "[\"']"
          if p ~= ROOT .. "/tests/lua/test_public_names.lua" and src:find(pat) then found[#found + 1] = p .. ": " .. old end
        end
      end
    end
  end
  for _, d in ipairs { "lua", "strategies", "tests", "bench", "tools", "examples", "docs" } do scan(ROOT .. "/" .. d) end
  table.sort(found)
  t.eq(table.concat(found, ", "), "")
end)

t.done()
