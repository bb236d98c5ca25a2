-- km.judge.same_work: a call's launch list and the comparison that refuses launch code whose
-- timed calls launch other work than the first (varying_work). Pure: no GPU.
local t = require "km.tap"
local sw = require "km.judge.same_work"

t.test("an entry says kernel, grid, block and shared memory as launched", function()
  t.eq(sw.entry("k", 64, 256, nil), "k grid=(64,1,1) block=(256,1,1) shared=0")
  t.eq(sw.entry("k", { 8, 4 }, { 32, 8, 1 }, 1024), "k grid=(8,4,1) block=(32,8,1) shared=1024")
  -- a float that is an integer launches as that integer (km.cuda's read_dim3): one entry
  t.eq(sw.entry("k", 64.0, { 256.0 }, 0.0), sw.entry("k", 64, 256, 0))
  t.eq(sw.dims("x"), nil)
end)

t.test("the same list is the same work; any change is told", function()
  local a = { sw.entry("k1", 64, 256), sw.entry("k2", 1, 32, 4096) }
  t.eq(sw.diff(a, { sw.entry("k1", 64, 256), sw.entry("k2", 1, 32, 4096) }), nil)
  local why = sw.diff(a, { sw.entry("k1", 32, 256), sw.entry("k2", 1, 32, 4096) })
  t.ok(why and why:find("launch 1 was k1 grid=(32,1,1)", 1, true) and why:find("first call's was k1 grid=(64,1,1)", 1, true), why)
  why = sw.diff(a, { sw.entry("k1", 64, 256) })
  t.ok(why and why:find("launched 1 kernel(s) where the first launched 2 (missing: k2", 1, true), why)
  why = sw.diff(a, { sw.entry("k1", 64, 256), sw.entry("k2", 1, 32, 4096), sw.entry("k3", 1, 1) })
  t.ok(why and why:find("(extra: k3", 1, true), why)
  t.ok(sw.diff(a, { sw.entry("k1", 64, 256), sw.entry("k2", 1, 32, 0) }), "shared memory counts")
  t.ok(sw.diff(a, { sw.entry("k2", 1, 32, 4096), sw.entry("k1", 64, 256) }), "order counts")
  t.eq(sw.diff({}, {}), nil)
  t.eq(sw.text(a), "k1 grid=(64,1,1) block=(256,1,1) shared=0; k2 grid=(1,1,1) block=(32,1,1) shared=4096")
end)

t.done()
