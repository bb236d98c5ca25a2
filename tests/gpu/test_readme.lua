-- GPU: the README's ten-line example runs as printed.
local t = require "km.tap"
t.require_gpu()
local testing = require "km.testing"
local ROOT = testing.paths()

t.test("the README example compiles, launches, compares and times", function()
  local text = assert(testing.read(ROOT .. "/README.md"))
  local code = text:match("## Ten lines\n\n```lua\n(.-)```")
  t.ok(code, "the README has the example")
  local n = select(2, code:gsub("\n", "\n"))
  t.ok(n <= 10, n .. " lines")
  local out = {}
  local env = setmetatable({ print = function(...) out[#out + 1] = { ... } end }, { __index = _G })
  assert(load(code, "=README", "t", env))()
  t.eq(out[1][1], true)
  t.ok(type(out[1][2]) == "number" and out[1][2] > 0, tostring(out[1][2]))
end)

t.done()
