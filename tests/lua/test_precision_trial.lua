-- Verify's precision trial without a GPU (docs/security.md, "What an fp32 verdict promises"):
-- which trial it is, the laws it draws by, and the norm-wise bound it judges by — fp32 sums
-- in another order stay under it, fp16/TF32/bf16 operands do not (the same arithmetic as
-- bench/precision_law.c, at one K, in Lua floats rounded to fp32 with string.pack).
-- tests/gpu/test_trust5_precision.lua plays a tensor-core-style kernel on the GPU. And the
-- first trial's look at outputs never written (verify.unwritten_first), compare stood in for.
local t = require "km.tap"
local verify = require "km.judge.verify"
local inputs = require "km.judge.inputs"
local compare = require "km.compare"

local function order_text(o)
  local r = {}
  for _, x in ipairs(o) do r[#r + 1] = x[1] .. "," .. x[2] .. (x[3] and "p" or "") end
  return table.concat(r, " ")
end

t.test("the precision trial is the timed shape's second seed, or one more trial after its first", function()
  t.eq(order_text(verify.trial_order(2, 3, true)), "1,1 1,2p 2,1 2,2 2,3 1,3")
  t.eq(order_text(verify.trial_order(2, 1, true)), "1,1 1,2p 2,1")
  t.eq(order_text(verify.trial_order(2, 2, true)), "1,1 1,3p 2,1 2,2 1,2")
  t.eq(order_text(verify.trial_order(2, 3, false)), "1,1 1,2 2,1 2,2 2,3 1,3")
  -- trimmed (a timed candidate): one trial at the timed shape, last: the precision trial where
  -- there is one, else the fresh seed
  t.eq(order_text(verify.trial_order(2, 3, true, true)), "2,1 2,2 2,3 1,2p")
  t.eq(order_text(verify.trial_order(2, 1, true, true)), "2,1 1,2p")
  t.eq(order_text(verify.trial_order(2, 3, false, true)), "2,1 2,2 2,3 1,3")
  t.eq(order_text(verify.trial_order(1, 1, true, true)), "1,2p")
  t.eq(order_text(verify.trial_order(1, 1, false, true)), "1,1")
end)

t.test("precision laws: zero-mean at the law's own scale; integer laws as they are", function()
  local u = inputs.precision_law { dist = "uniform", lo = 0, hi = 1 }
  t.eq(u.lo, -1); t.eq(u.hi, 1)
  local u2 = inputs.precision_law { dist = "uniform", lo = -3, hi = 2 }
  t.eq(u2.lo, -3); t.eq(u2.hi, 3)
  local n = inputs.precision_law { dist = "normal", mean = 3, std = 4 }
  t.eq(n.mean, 0); t.eq(n.std, 5)
  local i = inputs.precision_law { dist = "int", lo = 0, hi = 9 }
  t.eq(i.lo, 0); t.eq(i.hi, 9)
  local s = inputs.seeded({ dist = "uniform", lo = 0, hi = 1 }, 5, 2, true)
  t.eq(s.lo, -1); t.eq(s.seed, 5 * 7919 + 2)
  t.eq(inputs.seeded({ dist = "uniform", lo = 0, hi = 1 }, 5, 2).lo, 0)
end)

-- fp32 arithmetic in Lua: every result rounded to the nearest float
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
-- x with its mantissa cut to `bits` explicit bits (round to nearest)
local function round_bits(x, bits)
  if x == 0 then return 0 end
  local m, e = math.frexp(x)
  local scale = 2 ^ (bits + 1)
  return math.floor(m * scale + 0.5) / scale * 2 ^ e
end

t.test("the norm-wise bound: fp32 in other orders passes, fp16/TF32 and bf16 operands fail", function()
  local rows, k = 24, 2048
  local seed = 12345
  local function rnd() seed = (seed * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff return (seed >> 11) / 2 ^ 52 end
  local a, b = {}, {}
  for r = 1, rows do a[r], b[r] = {}, {} for q = 1, k do a[r][q], b[r][q] = f32(2 * rnd() - 1), f32(2 * rnd() - 1) end end
  local function dot(x, y, kind)
    local acc = 0
    if kind == "reverse" then
      for q = k, 1, -1 do acc = f32(acc + f32(x[q] * y[q])) end
    elseif kind == "split" then
      local part = { 0, 0, 0, 0, 0, 0, 0, 0 }
      for q = 1, k do local j = q % 8 + 1 part[j] = f32(part[j] + f32(x[q] * y[q])) end
      for j = 1, 8 do acc = f32(acc + part[j]) end
    else
      local bits = kind == "bf16" and 7 or kind == "half" and 10 or nil
      for q = 1, k do
        local xv, yv = x[q], y[q]
        if bits then xv, yv = round_bits(xv, bits), round_bits(yv, bits) end
        acc = f32(acc + f32(xv * yv))
      end
    end
    return acc
  end
  local function bytes(kind)
    local out = {}
    for r = 1, rows do for c = 1, rows do out[#out + 1] = string.pack("<f", dot(a[r], b[c], kind)) end end
    return table.concat(out)
  end
  local ref = bytes("seq")
  local rel = {}
  for _, kind in ipairs { "reverse", "split", "half", "bf16" } do rel[kind] = compare.rel_l2(bytes(kind), ref, "f32") end
  t.note(("rel_l2 at K = %d: reversed %.3g, 8 partial sums %.3g, fp16/TF32 operands %.3g, bf16 operands %.3g"):format(k,
    rel.reverse, rel.split, rel.half, rel.bf16))
  t.ok(rel.reverse < verify.PRECISION_L2 / 5, "fp32 reversed: " .. rel.reverse)
  t.ok(rel.split < verify.PRECISION_L2 / 5, "fp32 in 8 partial sums: " .. rel.split)
  t.ok(rel.half > verify.PRECISION_L2 * 3, "fp16/TF32 operands: " .. rel.half)
  t.ok(rel.bf16 > verify.PRECISION_L2 * 20, "bf16 operands: " .. rel.bf16)
end)

t.test("compare.rel_l2: NaN or infinity where the reference has none is infinite; zeros are 0", function()
  local p = string.pack
  t.eq(compare.rel_l2(p("<ff", 0, 0), p("<ff", 0, 0), "f32"), 0)
  t.eq(compare.rel_l2(p("<ff", 1, 0 / 0), p("<ff", 1, 2), "f32"), math.huge)
  t.eq(compare.rel_l2(p("<ff", 1, 1 / 0), p("<ff", 1, 2), "f32"), math.huge)
  t.eq(compare.rel_l2(p("<ff", 1, 0 / 0), p("<ff", 1, 0 / 0), "f32"), 0)
  t.eq(compare.rel_l2(p("<f", 1), p("<f", 0), "f32"), math.huge)
  t.ok(math.abs(compare.rel_l2(p("<ff", 3, 4.5), p("<ff", 3, 4), "f32") - 0.1) < 1e-12)
  t.ok(not pcall(compare.rel_l2, p("<f", 1), p("<ff", 1, 2), "f32"), "different lengths raise")
end)

-- the first trial's look at the outputs alone (tests/gpu/test_unwritten_first.lua on a GPU):
-- what it makes of the compare's poison count, with compare.allclose stood in for
t.test("outputs never written: the first trial fails them without a reference, saying where", function()
  local nan = 0 / 0
  local task = { outputs = { { name = "out", dtype = "f32" } }, tolerance = { f32 = { atol = 1e-4, rtol = 1e-4 } } }
  local tr = { si = 1, seed = 1, where = "shape 1 (n=1000), seed 1", dims = { out = { 1000 } } }
  local real = compare.allclose
  local seen
  compare.allclose = function(a, b, o)
    seen = { same = a == b, poison = o.poison }
    return { n = 1000, unwritten = 100, mismatches = 103, nan = 0, inf = 0, first = { index = 0, got = nan, want = nan },
      examples = { { index = 57, got = nan, want = nan }, { index = 0, got = nan, want = nan }, { index = 40, got = 2.5, want = 2.5 } } }
  end
  local v = { checks = {} }
  local ok, status, text, output = pcall(verify.unwritten_first, task, { out = "B" }, tr, v)
  compare.allclose = real
  t.ok(ok, status)
  t.eq(seen.same, true, "the output against itself"); t.eq(seen.poison, true)
  t.eq(status, "mismatch"); t.eq(output, "out")
  t.ok(text:find("100 of 1000 elements of 'out' were never written. At shape 1", 1, true), text)
  local first, second = text:find("(flat 0)", 1, true), text:find("(flat 57)", 1, true)
  t.ok(first and second and first < second, "the lowest first, once each: " .. text)
  t.ok(not text:find("flat 40", 1, true), "a written element is no example")
  t.ok(text:find("want not computed", 1, true), text)
  t.eq(#v.checks, 1)
  t.eq(v.checks[1].unwritten, 100); t.eq(v.checks[1].reference, "none"); t.eq(v.checks[1].ok, false)
  -- every element written: nothing to say, the reference judges
  compare.allclose = function() return { n = 1000, unwritten = 0, mismatches = 0, nan = 0, inf = 0, examples = {} } end
  ok, status = pcall(verify.unwritten_first, task, { out = "B" }, tr, v)
  compare.allclose = real
  t.ok(ok and status == nil, tostring(status))
  t.eq(#v.checks, 1)
end)

t.done()
