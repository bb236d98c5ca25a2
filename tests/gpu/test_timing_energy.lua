-- GPU: km.timing's clock and energy notes, and an error inside the timed function (its
-- events are released, the error goes on unchanged, timing works afterwards).
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local timing = require "km.timing"
local nvml = require "km.nvml"

local mod = assert(cuda.load(assert(nvrtc.compile([[
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64(); while (clock64() - t0 < cycles) {}
}]]))))
local spin = assert(mod:get("spin"))
local function work(cycles) return function() assert(spin{ grid = 132, block = 128 }(cycles)) end end

t.test("an error raised inside the timed function passes through; timing still works", function()
  local err = { "mine" }
  for _ = 1, 300 do -- 32 events each time if they leaked
    local calls = 0
    local ok, e = pcall(timing.time, function()
      calls = calls + 1
      if calls == 6 then error(err) end
      spin{ grid = 1, block = 32 }(1000)
    end, { mode = "warm", warmup = 2 })
    t.ok(not ok and e == err, tostring(e))
  end
  local r = timing.time(work(100000), { mode = "warm" })
  t.ok(r.median > 0, r.median)
end)

t.test("clock fields: start, end, min <= max, clock_moved a boolean", function()
  local r = timing.time(work(2000000), { mode = "warm" })
  t.note(("SM clock start %.0f end %.0f min %.0f max %.0f MHz, moved %s; energy %s"):format(r.sm_clock_start_mhz,
    r.sm_clock_mhz, r.sm_clock_min_mhz, r.sm_clock_max_mhz, tostring(r.clock_moved),
    r.energy_j and ("%.4f J/call over %.0f ms"):format(r.energy_j, r.energy_window_ms) or r.energy_unavailable))
  for _, k in ipairs { "sm_clock_start_mhz", "sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz" } do
    t.ok(r[k] > 300 and r[k] < 5000, k .. " " .. tostring(r[k]))
  end
  t.ok(r.sm_clock_min_mhz <= r.sm_clock_max_mhz)
  t.eq(type(r.clock_moved), "boolean")
  t.eq(r.clock_moved, r.sm_clock_max_mhz > r.sm_clock_min_mhz * 1.02)
end)

t.test("energy per call where NVML is there; a reason where it is not or the window is short", function()
  local ok, why = nvml.available()
  if not ok then
    local r = timing.time(work(100000), { mode = "warm", energy = true })
    t.eq(r.energy_j, nil)
    t.ok(r.energy_unavailable and r.energy_unavailable:find("NVML", 1, true), tostring(r.energy_unavailable))
    return t.note("no NVML: " .. tostring(why))
  end
  local uuid = cuda.device().uuid
  local used, total = nvml.memory(uuid)
  t.ok(used > 0 and total > used, tostring(used) .. " / " .. tostring(total))
  t.ok(nvml.energy_mj(uuid) > 0)
  -- ~1 ms kernels on every SM for at least 100 ms
  local js = {}
  for i = 1, 3 do
    local r = timing.time(work(2000000), { mode = "warm", energy = true })
    local watts = r.energy_j and r.energy_j * r.energy_calls / (r.energy_window_ms / 1e3)
    t.note(("%.4f ms/call, %s J/call over %s ms, %s calls (n=%d): %s W"):format(r.median, tostring(r.energy_j),
      tostring(r.energy_window_ms), tostring(r.energy_calls), r.n, tostring(watts)))
    t.ok(r.energy_j and r.energy_window_ms >= 100, tostring(r.energy_unavailable))
    t.ok(watts > 30 and watts < 1500, tostring(watts))
    t.ok(r.energy_calls > 20 and r.energy_calls <= r.n, tostring(r.energy_calls))
    t.eq(r.energy_includes_flush, nil)
    js[i] = r.energy_j
  end
  table.sort(js)
  t.ok(js[3] / js[1] < 1.15, "energy per call agrees across runs within 15%: " .. table.concat(js, " "))
  -- twice the cycles, about twice the energy per call
  local r2 = timing.time(work(4000000), { mode = "warm", energy = true })
  t.note(("twice the work: %.4f J/call vs %.4f"):format(r2.energy_j, js[2]))
  t.ok(r2.energy_j / js[2] > 1.6 and r2.energy_j / js[2] < 2.4, r2.energy_j / js[2])
  -- a window of a few ms: no number, a reason
  local s = timing.time(work(10000), { mode = "warm", energy = true, min_samples = 20, max_samples = 20 })
  t.eq(s.energy_j, nil)
  t.ok(s.energy_unavailable and s.energy_unavailable:find("energy counter", 1, true), tostring(s.energy_unavailable))
  -- not asked for: no window (its reads would hold up every wait for a sample), and said so
  local n = timing.time(work(2000000), { mode = "warm" })
  t.eq(n.energy_j, nil)
  t.eq(n.energy_unavailable, "not measured (energy = false)")
  local c = timing.time(work(2000000), { energy = true })
  t.ok(c.energy_j and c.energy_includes_flush == true, tostring(c.energy_unavailable))
end)

t.done()
