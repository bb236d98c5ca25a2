-- bench/placement.lua — does a memory-bound kernel's median depend on where its buffers lie,
-- or on its input values? 19_ReLU's candidate (bench/kb_relu) has shown two medians in one
-- run, 3.24 and 3.6 ms (bench/RESULTS.md, runs BQ, BS). Here its kernel, at 19_ReLU's shape
-- (N floats in, N out), is timed cold as the judge times it (km.timing, a fresh draw of x before
-- every sample) on buffers allocated with a spacer of each size between them, x first or y
-- first, each arrangement timed twice, for each input law asked for; the addresses are logged.
--
--   build/kmrun bench/placement.lua [--law normal,uniform] [--n N] [--spacers MiB,...]
--
-- --law: normal (mean 0, std 1: half the outputs are 0) and/or uniform ([0, 1): 19_ReLU's
-- torch.rand, every output equals its input). One line per timing: spacer bytes, order, x's
-- offset in its GiB, y - x in MiB, median, quartiles, samples. Exit status: 0, 2 on usage
-- errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/placement.lua", synopsis = "[options]",
  about = "A memory-bound kernel's median against its buffers' placement and its input law.",
  options = {
    { "law", "LAWS", "input laws, comma-separated: normal, uniform", default = "normal" },
    { "n", "N", "elements in and out (default 19_ReLU's 4096 x 393216)", type = "positive", default = 4096 * 393216 },
    { "spacers", "MIB,...", "spacer sizes in MiB between the buffers", default = "0,2,32,256,1024,3079" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local LAWS = { normal = { dist = "normal", mean = 0, std = 1 }, uniform = { dist = "uniform", lo = 0, hi = 1 } }
local laws, spacers = {}, {}
for w in (a.law .. ","):gmatch("([^,]*),") do
  if not LAWS[w] then io.stderr:write("bench/placement.lua: --law: normal or uniform, not '", w, "'\n") return EXIT.USAGE end
  laws[#laws + 1] = w
end
for w in (a.spacers .. ","):gmatch("([^,]*),") do
  local m = tonumber(w)
  if not m or m < 0 or m ~= math.floor(m) then
    io.stderr:write("bench/placement.lua: --spacers: whole MiB, not '", w, "'\n")
    return EXIT.USAGE
  end
  spacers[#spacers + 1] = m
end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/placement.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local buffer, cuda, nvrtc, timing = require "km.buffer", require "km.cuda", require "km.nvrtc", require "km.timing"
local ROOT = arg[0]:match("^(.*)/bench/") or "."
local f = io.open(ROOT .. "/bench/kb_relu/kernel.cu")
local src = f:read("a")
f:close()
local fn = assert(assert(cuda.load(assert(nvrtc.compile(src)))):get("relu"))
local dev = cuda.device()
local N, GiB, MiB = a.n, 1 << 30, 1 << 20
local seed = 1
local function time_on(x, y, law)
  local l = {}
  for k, v in pairs(LAWS[law]) do l[k] = v end
  return assert(timing.time(function()
    assert(fn:launch({ grid = dev.sm_count * 8, block = 256 }, x, y, N))
  end, { mode = "cold", min_samples = 10, target = 0.005, max_ms = 3000,
         before = function() seed = seed + 1; l.seed = seed; x:random(l) end }))
end
print(("device %s, %d SMs, %s UTC; N = %d"):format(dev.name, dev.sm_count, os.date("!%Y-%m-%d %H:%M"), N))
print("law spacer_bytes order x_offset_in_GiB y-x_MiB median_ms p25 p75 n")
for _, law in ipairs(laws) do
  for _, mib in ipairs(spacers) do
    for _, order in ipairs { "xy", "yx" } do
      local first = buffer.new("f32", N)
      local sp = mib > 0 and buffer.new("u8", mib * MiB) or nil
      local second = buffer.new("f32", N)
      local x, y = first, second
      if order == "yx" then x, y = second, first end
      for _ = 1, 2 do
        local r = time_on(x, y, law)
        print(("%s %d %s %d %.1f %.4f %.4f %.4f %d"):format(law, mib * MiB, order, x:ptr() % GiB,
          (y:ptr() - x:ptr()) / MiB, r.median, r.p25, r.p75, r.n))
        io.stdout:flush()
      end
      first:free(); second:free(); if sp then sp:free() end
    end
  end
end
return EXIT.OK
