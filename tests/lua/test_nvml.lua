-- km.nvml's loader without a GPU: no library and a broken one are reasons, never crashes;
-- against a stand-in libnvidia-ml (tests/c/fake_libnvml.c) every entry point is found and an
-- energy window gives joules per call between the counter's steps, or says why not.
local t = require "km.tap"
local testing = require "km.testing"

local _, KMRUN, BUILD = testing.paths()
local FAKE = BUILD .. "/tests/fake_libnvml.so"
local UUID = "GPU-00000000-0000-0000-0000-000000000001"

-- runs `code` in a fresh kmrun with `env`; returns what it printed
local function run(env, code)
  local p = io.popen(env .. " " .. KMRUN .. " -e '" .. code .. "' 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  return out
end

t.test("no library: nil and the reason, every call too", function()
  local out = run("KM_NVML_LIB=/nonexistent/libnvidia-ml.so.1",
    [[local n = require "km.nvml"; print(n.available()); print(n.energy_mj(0)); print(n.window(0):stop(1))]])
  t.ok(out:find("^nil\tno NVML: cannot load /nonexistent/libnvidia%-ml%.so%.1"), out)
  t.ok(out:find("\nnil\tenergy: no NVML: cannot load", 1, true), out)
  t.ok(out:find("NO_NVML", 1, true), out)
  t.ok(out:find("rc=0", 1, true), out)
end)

t.test("on this machine: true, or nil and why", function()
  local out = run("", [[print(require("km.nvml").available())]])
  t.ok(out:find("^true") or out:find("^nil\tno NVML: .*libnvidia%-ml%.so%.1"), out)
end)

-- A GPU worker starts NVML on a thread of its own (nvml.load_ahead): it returns at once, and
-- the first use waits for that one initialisation, not a second.
t.test("load_ahead returns at once; the first use waits for that initialisation", function()
  if not io.open(FAKE) then return t.note("no " .. FAKE .. " (make test builds it)") end
  local out = run("KM_NVML_LIB=" .. FAKE .. " FAKE_NVML_INIT_MS=300", [[
local n, wall = require "km.nvml", require("km.timing").wall
local t0 = wall()
print("ahead", n.load_ahead(), string.format("%.3f", wall() - t0))
print("available", n.available(), string.format("%.3f", wall() - t0))
local t1 = wall()
print("again", n.available(), string.format("%.3f", wall() - t1))]])
  local a = tonumber(out:match("ahead	true	(%S+)"))
  local b = tonumber(out:match("available	true	(%S+)"))
  local c = tonumber(out:match("again	true	(%S+)"))
  t.ok(a and a < 0.1, "load_ahead did not wait for nvmlInit: " .. out)
  t.ok(b and b >= 0.25 and b < 0.9, "the first use waited for the one initialisation: " .. out)
  t.ok(c and c < 0.05, "then none: " .. out)
end)

t.test("a library without nvmlInit_v2, and nvmlInit failing, say so", function()
  local out = run("KM_NVML_LIB=" .. KMRUN:gsub("/kmrun$", "/lib/libcjson.so.1"), [[print(require("km.nvml").available())]])
  t.ok(out:find("lacks nvmlInit_v2", 1, true), out)
  if not io.open(FAKE) then return t.note("no " .. FAKE .. " (make test builds it)") end
  out = run("KM_NVML_LIB=" .. FAKE .. " FAKE_NVML_MODE=noinit", [[print(require("km.nvml").available())]])
  t.ok(out:find("nvmlInit failed: Driver Not Loaded", 1, true), out)
end)

if not io.open(FAKE) then t.skip_all("no " .. FAKE .. " (make test builds it)") end
local ENV = "KM_NVML_LIB=" .. FAKE

t.test("the clock state: SM and memory clocks and the reasons they are held down", function()
  local out = run(ENV .. " FAKE_NVML_REASONS=68", [[local c = require("km.nvml").clocks(0)
    print(c.sm_mhz, c.mem_mhz, c.reasons_mask, table.concat(c.reasons, ","))
    print(require("km.nvml").clocks("GPU-ffffffff-0000-0000-0000-000000000000"))]])
  t.ok(out:find("^1755\t2619\t68\tsw_power_cap,hw_thermal\n"), out) -- 0x4 | 0x40
  t.ok(out:find("nil	Not Found	NVML_ERROR", 1, true), out)
  out = run(ENV .. " FAKE_NVML_REASONS=0", [[local c = require("km.nvml").clocks(0); print(c.reasons_mask, #c.reasons)]])
  t.ok(out:find("^0\t0\n"), out)
end)

t.test("devices by index and UUID; memory, SM clock and the energy counter", function()
  local out = run(ENV, [[local n = require "km.nvml"
    print(n.available())
    print(n.memory(0))
    print(n.memory("]] .. UUID .. [["))
    print(n.sm_clock(0))
    print(n.memory("GPU-ffffffff-0000-0000-0000-000000000000"))
    print(n.memory(5))
    local a = n.energy_mj(0); os.execute("sleep 0.1"); local b = n.energy_mj(0)
    print("delta", b - a, math.type(a))]])
  t.ok(out:find("^true\n"), out)
  t.ok(out:find("\n3221225472\t85899345920\n3221225472\t85899345920\n1755\n", 1, true), out)
  t.ok(out:find("nil\tNot Found\tNVML_ERROR", 1, true), out)
  t.ok(out:find("nil\tUnknown Error\tNVML_ERROR", 1, true), out) -- index 5: the fake's INVALID_ARGUMENT
  local delta = tonumber(out:match("delta\t(%d+)\tinteger"))
  t.ok(delta and delta >= 300 * 80 and delta <= 300 * 1000, out) -- 300 W over ~100 ms (more on a busy CI), in 20 ms steps
end)

-- polls a window while "calls" of `ms` milliseconds each run for `total` seconds
local function poll_loop(ms, total)
  return ([[local wall = require("km.timing").wall
    local t0, calls = wall(), 0
    while wall() - t0 < %g do
      local t1 = wall(); while wall() - t1 < %g do end
      calls = calls + 1; w:poll(calls)
    end]]):format(total, ms / 1e3)
end

t.test("an energy window: joules per call between the counter's steps", function()
  local out = run(ENV .. " FAKE_NVML_WATTS=400", [[local n = require "km.nvml"
    local w = n.window("]] .. UUID .. [[")
    ]] .. poll_loop(2, 0.35) .. [[
    print("long", w:stop())]])
  local j, span, calls = out:match("long\t(%S+)\t(%S+)\t(%S+)")
  j, span, calls = tonumber(j), tonumber(span), tonumber(calls)
  -- wall-clock bounds are loose: CI's two cores may be busy with other tests
  t.ok(span and span >= 300 and span <= 1000, out)
  -- the fake draws 400 W: the energy between its steps over the calls between them
  t.ok(j and math.abs(j * calls / (span / 1e3) / 400 - 1) < 0.03, out)
  t.ok(calls and calls > 0 and calls <= span / 2 * 1.15, out)
end)

t.test("too few steps, steps too close, a frozen or unsupported counter: a reason", function()
  local out = run(ENV, [[local n = require "km.nvml"
    local w = n.window(0)
    print("none", w:stop())
    ]] .. poll_loop(2, 0.06) .. [[
    print("close", w:stop())]])
  t.ok(out:find("none\tnil\tenergy: the energy counter moved 0 times during the work: too short to measure", 1, true), out)
  t.ok(out:find("close\tnil\tenergy: the energy counter's steps seen during the work span [%d.]+ ms, under 100 ms: too coarse to measure\tTOO_SHORT"), out)
  out = run(ENV .. " FAKE_NVML_MODE=frozen", [[local n = require "km.nvml"
    local w = n.window(0)
    ]] .. poll_loop(2, 0.15) .. [[
    print(w:stop())]])
  t.ok(out:find("nil\tenergy: the energy counter moved 0 times", 1, true), out)
  out = run(ENV .. " FAKE_NVML_MODE=noenergy", [[local n = require "km.nvml"
    print(n.energy_mj(0)); local w = n.window(0); w:poll(1); print(w:stop()); print(n.memory(0))]])
  t.ok(out:find("nil\tenergy: Not Supported\tNVML_ERROR\nnil\tenergy: Not Supported\tNVML_ERROR", 1, true), out)
  t.ok(out:find("\n3221225472\t85899345920\n", 1, true), out)
end)

t.done()
