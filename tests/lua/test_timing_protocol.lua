-- km.timing's protocol without a GPU: the key names every option that decides a timing,
-- equal options give equal keys, defaults match the stop rule's, and misuse raises before
-- any CUDA call (timing.time's own options are read by the same function).
local t = require "km.tap"
local timing = require "km.timing"

local DEFAULT = "km.timing/2 mode=cold rep=1 warmup=3,5ms stop=noise<=0.002,n=20..300,min_ms=0,max_ms=2000 "
  .. "flush=2xL2 energy=0"

t.test("the default key, and the same key for the same options spelled out", function()
  t.eq(timing.protocol_key(), DEFAULT)
  t.eq(timing.protocol_key {}, DEFAULT)
  t.eq(timing.protocol_key { mode = "cold", rep = 1, warmup = 3, warmup_ms = 5, min_samples = 20, max_samples = 300,
    target = 0.002, min_ms = 0, max_ms = 2000 }, DEFAULT)
  -- what does not decide a timing is not in it: hooks, keeping the samples
  t.eq(timing.protocol_key { samples = true, before = function() end, after = function() end }, DEFAULT)
end)

t.test("every option that decides a timing changes the key", function()
  local seen = { [DEFAULT] = "default" }
  for _, o in ipairs {
    { mode = "warm" }, { mode = "graph" }, { rep = 4 }, { warmup = 10 }, { warmup_ms = 25 },
    { min_samples = 10 }, { max_samples = 100 }, { target = 0.005 }, { min_ms = 50 }, { max_ms = 600 },
    { flush_bytes = 1 << 27 }, { energy = true },
  } do
    local k = timing.protocol_key(o)
    local name = next(o)
    t.ok(not seen[k], name .. ": " .. k .. " (same as " .. tostring(seen[k]) .. ")")
    seen[k] = name
  end
  -- warm and graph modes do not flush: the flush size is not theirs
  t.eq(timing.protocol_key { mode = "warm", flush_bytes = 1 << 27 }, timing.protocol_key { mode = "warm" })
end)

t.test("the protocol table carries the fields, the version and the key", function()
  local p = timing.protocol { mode = "warm", min_ms = 50, energy = true }
  t.eq(p.version, 2)
  t.eq(p.key, timing.protocol_key { mode = "warm", min_ms = 50, energy = true })
  t.eq(p.mode, "warm")
  t.eq(p.min_samples, 20)
  t.eq(p.max_samples, 300)
  t.eq(p.target, 0.002)
  t.eq(p.min_ms, 50)
  t.eq(p.max_ms, 2000)
  t.eq(p.energy, true)
  t.eq(p.flush_bytes, nil)
  t.eq(timing.protocol().flush_bytes, 0) -- 0: twice the device's L2
end)

t.test("misuse raises, in timing.time before any CUDA call too", function()
  t.raises(function() timing.protocol_key { mode = "hot" } end, "unknown mode 'hot'")
  t.raises(function() timing.protocol_key { min_samples = 30, max_samples = 20 } end, "min_samples <= max_samples")
  t.raises(function() timing.protocol_key { min_samples = 0 } end, "min_samples")
  t.raises(function() timing.protocol_key { max_ms = 0 } end, "max_ms > 0")
  t.raises(function() timing.protocol_key { target = -1 } end, "target >= 0")
  t.raises(function() timing.protocol_key { rep = 0 } end, "rep >= 1")
  t.raises(function() timing.protocol_key "cold" end, "table expected")
  t.raises(function() timing.time(function() end, { mode = "hot" }) end, "unknown mode 'hot'")
end)

t.done()
