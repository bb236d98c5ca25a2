-- km.run.search: ask/tell over parameters — every method, duplicates, constraints, budgets.
local t = require "km.tap"
local search = require "km.run.search"

local SPACE = { BLOCK = { 64, 128, 256, 512, 1024 }, VEC = { 1, 2, 4 } }
-- a bowl with its minimum at BLOCK = 256, VEC = 4
local function cost(p) return (math.log(p.BLOCK, 2) - 8) ^ 2 + (4 - p.VEC) + 1 end

local function run(method, opts)
  opts = opts or {}
  opts.method = method
  local s = search.new(SPACE, opts)
  local seen, n = {}, 0
  while true do
    local p = s:ask()
    if not p then break end
    local key = s:key(p)
    assert(not seen[key], "asked twice: " .. key)
    seen[key] = true
    n = n + 1
    s:tell(p, cost(p))
  end
  return s, n
end

t.test("exhaustive visits every point once and finds the best", function()
  local s, n = run("exhaustive")
  t.eq(n, 15)
  local best, score = s:best()
  t.eq(best.BLOCK, 256)
  t.eq(best.VEC, 4)
  t.eq(score, 1.0)
end)

t.test("random, anneal and bandit never repeat and respect the budget", function()
  for _, m in ipairs { "random", "anneal", "bandit" } do
    local s, n = run(m, { budget = 8, seed = 3 })
    t.eq(n, 8, m)
    t.ok(s:best(), m)
    local s2, n2 = run(m, { budget = 100, seed = 3 })
    t.eq(n2, 15, m .. " stops when the space is exhausted")
    t.eq(s2:best().BLOCK, 256, m)
  end
end)

t.test("a seed reproduces a search", function()
  local a = run("anneal", { budget = 6, seed = 42 })
  local b = run("anneal", { budget = 6, seed = 42 })
  for i = 1, 6 do t.eq(a:key(a.results[i].params), b:key(b.results[i].params)) end
end)

t.test("constraints skip points without spending the budget", function()
  local s, n = run("exhaustive", { accept = function(p) return p.BLOCK * p.VEC <= 1024 end })
  t.eq(n, 12)
  t.eq(s.rejected, 3)
  for _, r in ipairs(s.results) do t.ok(r.params.BLOCK * r.params.VEC <= 1024) end
end)

t.test("a point can be told before any is asked (a known starting point)", function()
  for _, m in ipairs { "exhaustive", "random", "anneal", "bandit" } do
    local s = search.new(SPACE, { method = m, seed = 1 })
    s:tell({ BLOCK = 256, VEC = 1 }, 4)
    local p = s:ask()
    t.ok(p, m)
  end
end)

t.test("failed points rank last; ranked is ordered", function()
  local s = search.new({ A = { 1, 2, 3 } })
  s:tell({ A = 1 }, 5)
  s:tell({ A = 2 }, nil)
  s:tell({ A = 3 }, 2)
  local r = s:ranked()
  t.eq(r[1].params.A, 3)
  t.eq(r[3].params.A, 2)
  t.raises(function() search.new({ A = {} }) end, "non-empty list")
  t.raises(function() search.new(SPACE, { method = "genetic" }) end, "unknown method")
end)

t.done()
