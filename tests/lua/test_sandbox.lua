-- km.sandbox: launch code sees an allow-list and a budget it cannot escape.
local t = require "km.tap"
local sandbox = require "km.sandbox"

t.test("launch code returns a function and runs with its arguments", function()
  local fn = assert(sandbox.load("return function(k, io, s) return k + s.n, math.max(1, 2) end", "x.lua"))
  local ok, a, b = sandbox.call(fn, nil, 1, {}, { n = 41 })
  t.eq(ok, true)
  t.eq(a, 42)
  t.eq(b, 2)
end)

t.test("no io, os, require, load, debug, package, string.dump", function()
  for _, name in ipairs { "io", "os", "require", "load", "loadstring", "dofile", "debug", "package", "collectgarbage" } do
    local fn = assert(sandbox.load("return function() return " .. name .. " end"))
    local ok, v = sandbox.call(fn)
    t.eq(ok, true)
    t.eq(v, nil, name)
  end
  local fn = assert(sandbox.load("return function() return string.dump end"))
  t.eq(select(2, sandbox.call(fn)), nil)
  fn = assert(sandbox.load("return function() io.open('/etc/passwd') end"))
  local ok, err = sandbox.call(fn)
  t.eq(ok, false)
  t.ok(err:find("io", 1, true), err)
  -- the host's string table is not reachable through the copy
  fn = assert(sandbox.load("return function() string.rep = nil; return ('x'):rep(3) end"))
  ok = sandbox.call(fn)
  t.eq(string.rep("a", 2), "aa")
end)

t.test("string.dump is not reachable through a string's methods once hardened", function()
  local fn = assert(sandbox.load("return function() return ('').dump end"))
  sandbox.harden_strings()
  local ok, v = sandbox.call(fn)
  t.eq(ok, true)
  t.eq(v, nil)
  t.eq(("abc"):upper(), "ABC", "other methods still work")
  t.eq(("%d"):format(7), "7")
end)

t.test("an endless loop hits the budget, and pcall cannot swallow it", function()
  local fn = assert(sandbox.load("return function() while true do end end"))
  local ok, err = sandbox.call(fn, { budget = 100000 })
  t.eq(ok, false)
  t.ok(err:find("instruction budget", 1, true), err)
  fn = assert(sandbox.load([[return function()
    for i = 1, 100 do pcall(function() while true do end end) end
    return "escaped" end]]))
  ok, err = sandbox.call(fn, { budget = 100000 })
  t.eq(ok, false)
  t.ok(err:find("instruction budget", 1, true), err)
  fn = assert(sandbox.load([[return function() local r = { xpcall(function() while true do end end, function(e) return e end) } return "escaped" end]]))
  ok, err = sandbox.call(fn, { budget = 100000 })
  t.eq(ok, false)
end)

t.test("syntax errors, binary chunks and non-functions are refused", function()
  local fn, err = sandbox.load("return function( end", "bad.lua")
  t.eq(fn, nil)
  t.ok(err:find("bad.lua", 1, true), err)
  fn, err = sandbox.load(string.dump(function() end))
  t.eq(fn, nil)
  fn, err = sandbox.load("return 42")
  t.eq(fn, nil)
  t.ok(err:find("must return a function", 1, true), err)
end)

t.done()
