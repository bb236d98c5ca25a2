-- GPU: a kernel that writes the timing gate's page (docs/timing.md, "The gate"; docs/eval.md,
-- "Threat model"). The page is host memory mapped into the device, at an address no launch
-- argument gives; an attacker would learn it in a dry run, and timing.gate_page_address(), a
-- test hook, stands in for that here. Written, `released` opens every later gate at once (a
-- PyTorch baseline timed after it holds the host's launch gaps, and a speedup over it grows);
-- `timeouts` hides or fakes a timeout. Every write that could open a gate must be found (the
-- timing fails with GATE_TAMPERED; timing.gate_check() counts it), the page put back (the next
-- timing is gated and clean), and a judged candidate that writes it gets inputs_modified, with
-- no timing taken over it kept on disk.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local timing = require "km.timing"
local task = require "km.task"
local baseline = require "km.task.baseline"
local judge_mod = require "km.judge"
local testing = require "km.testing"

local ROOT = testing.paths()
local PAGE = assert(timing.gate_page_address())
local PAGE_ADDR = ("%dull"):format(PAGE)
local HUGE = 1 << 62

-- The attacker's kernels, the page's address written in as a model would after a dry run.
local ATTACKS = [[
#define RELEASED ((volatile unsigned long long *)PAGE_ADDR)
#define TIMEOUTS (RELEASED + 1)
extern "C" __global__ void open_gates(void) { *RELEASED = 1ull << 62; }
extern "C" __global__ void open_and_undo(void) {
  unsigned long long was = *RELEASED;
  *RELEASED = 1ull << 62;
  __threadfence_system();
  *RELEASED = was;
}
extern "C" __global__ void lower_timeouts(void) { *TIMEOUTS = *TIMEOUTS - 1; }
extern "C" __global__ void raise_timeouts(void) { *TIMEOUTS = *TIMEOUTS + 1; }
extern "C" __global__ void read_page(unsigned long long *out) { out[0] = *RELEASED; out[1] = *TIMEOUTS; }
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
]]
local mod = assert(cuda.load(assert(nvrtc.compile(ATTACKS, { defines = { PAGE_ADDR = PAGE_ADDR } }))))
local k = {}
for _, name in ipairs { "open_gates", "open_and_undo", "lower_timeouts", "raise_timeouts", "read_page", "spin" } do
  k[name] = assert(mod:get(name))
end
local function launch(name, ...) assert(k[name] { grid = 1, block = 1 }(...)) end
local function attack(name) launch(name) assert(cuda.synchronize()) end

-- The page as the device sees it: released, timeouts.
local out = buffer.new("u8", 16)
local function page()
  launch("read_page", out)
  assert(cuda.synchronize())
  return string.unpack("<I8I8", out:to_string())
end

-- A host slower than the GPU (test_timing.lua's): two short kernels with 0.3 ms of host work
-- between them. Gated, a sample is the kernels' ~20 us; with its gate open early, it holds the gap.
local function busy(ms) local t0 = os.clock() while os.clock() - t0 < ms / 1e3 do end end
local function slow_host() launch("spin", 20000); busy(0.3); launch("spin", 20000) end
local OPTS = { min_samples = 10, target = 0.01 }

local function gated_and_clean(what)
  local n0 = timing.gate_check()
  local r = assert(timing.time(slow_host, OPTS))
  t.eq(r.gated, r.n + r.n_extra, what .. ": every sample gated")
  t.eq(r.gate_timeouts, 0, what)
  t.ok(r.p75 < 0.1, what .. ": no host gap inside the window: " .. r.p75)
  t.eq(timing.gate_check(), n0, what .. ": nothing found")
end

-- A timing's answer (last, whole) was GATE_TAMPERED, naming what was written and where found.
local function tampered(written, where, res, msg, code)
  t.eq(res, nil)
  t.eq(code, "GATE_TAMPERED", msg)
  t.ok(tostring(msg):find(written, 1, true), msg)
  if where then t.ok(tostring(msg):find("found at " .. where, 1, true), msg) else t.note(msg) end
end

t.test("a gate that times out is the device's count, not tampering", function()
  local n0 = timing.gate_check()
  local _, t0 = page()
  local r = assert(timing.time(function() launch("spin", 20000); assert(cuda.synchronize()) end,
    { min_samples = 10, max_samples = 20, target = 0 }))
  t.ok(r.gate_timeouts >= 1, r.gate_timeouts)
  local _, t1 = page()
  t.ok(t1 >= t0 + 1, ("timeouts %d -> %d"):format(t0, t1))
  t.eq(timing.gate_check(), n0)
  gated_and_clean("after a timeout")
end)

t.test("released written between timings: the next timing finds it at its start, puts it back, fails", function()
  local n0 = timing.gate_check()
  local r0, t0 = page()
  attack("open_gates")
  local r1 = page()
  t.eq(r1, HUGE, "the write landed")
  tampered("released written", "the start of the run", timing.time(slow_host, OPTS))
  t.eq(timing.gate_check(), n0 + 1)
  local r2, t2 = page()
  t.eq(r2, r0, "released put back")
  t.eq(t2, t0)
  gated_and_clean("after the write")
end)

t.test("released written by the timed work itself, in its fifth sample: the timing fails", function()
  local n0 = timing.gate_check()
  local samples = 0
  tampered("released written", nil, timing.time(function()
    launch("spin", 20000)
    if samples == 5 then launch("open_gates") end
  end, { min_samples = 10, target = 0.01, before = function(phase)
    if phase == "sample" then samples = samples + 1 end
  end }))
  t.eq(timing.gate_check(), n0 + 1)
  t.ok(page() < HUGE, "released put back")
  gated_and_clean("after the timed write")
end)

t.test("timeouts lowered (a timeout hidden) or raised outside any gate (one faked): the timing fails", function()
  local _, t0 = page()
  t.ok(t0 >= 1, "a real timeout came first: " .. t0)
  local n0 = timing.gate_check()
  attack("lower_timeouts")
  tampered("timeouts written", "the start of the run", timing.time(slow_host, OPTS))
  t.eq(select(2, page()), t0)
  attack("raise_timeouts")
  tampered("timeouts written", "the start of the run", timing.time(slow_host, OPTS))
  t.eq(select(2, page()), t0)
  t.eq(timing.gate_check(), n0 + 2)
  gated_and_clean("after timeouts written")
end)

t.test("timing.gate_check() finds a write between timings and puts the page back", function()
  local n0 = timing.gate_check()
  local r0 = page()
  attack("open_gates")
  t.eq(timing.gate_check(), n0 + 1)
  t.eq(page(), r0)
  t.eq(timing.gate_check(), n0 + 1, "counted once")
end)

-- What the check cannot count on seeing: a write the same kernel undoes before it ends (the
-- host sees it only if it happens to read the page between the two writes). No gate runs
-- between them (a gate runs on the stream after the kernel), so none opens early: unseen, the
-- timing is gated throughout and clean.
t.test("a write undone by the same kernel opens no gate (and is seen only by chance)", function()
  local n0 = timing.gate_check()
  local r, msg, code = timing.time(function() slow_host(); launch("open_and_undo") end, OPTS)
  if r then
    t.eq(r.gated, r.n + r.n_extra)
    t.ok(r.p75 < 0.1, r.p75)
    t.eq(timing.gate_check(), n0)
  else
    t.eq(code, "GATE_TAMPERED", msg)
    t.note("the host read the page between the kernel's two writes: " .. tostring(msg))
  end
  t.ok(page() < HUGE)
end)

-- The C API's km_time (an embedding host: a C program built here against libkmrun, in its
-- own process with its own page) answers KMRUN_ETAMPERED, code GATE_TAMPERED; the attacker
-- there is a Lua script the host runs (km_run_script), which learns the page through the hook.
local BUILD = select(3, testing.paths())
local HOST = [[
#include <stdio.h>
#include "kmrun.h"
static km_kern *spin;
static km_status work(void *ud) {
  long long c = 20000;
  void *args[] = {&c};
  km_launch_cfg cfg = {{1, 1, 1}, {1, 1, 1}, 0};
  (void)ud;
  return km_launch(spin, &cfg, args);
}
int main(int argc, char **argv) {
  km_rt *rt;
  km_prog *p;
  km_mod *m;
  if (argc < 2 || km_open(KMRUN_VERSION_NUM, -1, &rt) || km_compile(
      "extern \"C\" __global__ void spin(long long c) { long long t = clock64(); while (clock64() - t < c) {} }",
      NULL, &p) || km_mod_load(rt, p, &m) || km_kern_get(m, "spin", &spin)) {
    printf("setup: %s\n", km_errmsg());
    return 2;
  }
  km_time_opts o = {KM_TIME_WARM, 0, 10, 0, 0, 0, 0};
  km_time_result r;
  for (int i = 0; i < 3; i++) {
    if (i == 1) {
      int code = 1;
      km_status s = km_run_script(argv[1], 0, NULL, &code);
      printf("script %s %d %s\n", km_status_name(s), code, s ? km_errmsg() : "");
    }
    km_status s = km_time(rt, work, NULL, &o, &r);
    printf("time %s|%s|%s\n", km_status_name(s), s ? km_errcode() : "", s ? km_errmsg() : "");
  }
  return 0;
}
]]
if select(2, testing.sh("command -v cc >/dev/null && test -f " .. BUILD .. "/lib/libkmrun.so")) ~= 0 then
  t.skip("km_time (C API) over a written page", "no cc on this host, or no " .. BUILD .. "/lib/libkmrun.so")
else
  t.test("km_time (C API) over a written page: KMRUN_ETAMPERED, GATE_TAMPERED; the next timing is clean", function()
    local dir = testing.tmpdir()
    testing.write(dir .. "/host.c", HOST)
    testing.write(dir .. "/attack.lua", ([[
local cuda, nvrtc, timing = require "km.cuda", require "km.nvrtc", require "km.timing"
local prog = assert(nvrtc.compile(%q, { defines = { PAGE_ADDR = ("%%dull"):format(assert(timing.gate_page_address())) } }))
assert(assert(cuda.load(prog)):get("open_gates") { grid = 1, block = 1 }())
assert(cuda.synchronize())
]]):format(ATTACKS))
    local out, rc = testing.sh(("cc -std=c99 -I%s/include -o %s/host %s/host.c -L%s/lib -lkmrun -Wl,-rpath,%s/lib && %s/host %s/attack.lua")
      :format(ROOT, dir, dir, BUILD, BUILD, dir, dir))
    testing.sh("rm -rf " .. dir)
    t.eq(rc, 0, out)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    t.eq(lines[1], "time KMRUN_OK||", out)
    t.ok((lines[2] or ""):match("^script KMRUN_OK 0"), out)
    t.ok((lines[3] or ""):match("^time KMRUN_ETAMPERED|GATE_TAMPERED|km_time: the gate's page was written .-released written; " ..
      "found at the start of the run"), out)
    t.eq(lines[4], "time KMRUN_OK||", out)
  end)
end

----------------------------------------------------------------------------------------
-- the judge: a candidate that writes the page fails (inputs_modified), the page is put back
-- for the next, and no timing taken while it was written is kept on disk

local rowsum = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))
local STARTER = assert(task.starter(rowsum))
local LAST = "if (threadIdx.x == 0) y[r] = part[0];"
-- The starter, with thread 0 of row 0 also writing the page from its FROM_CALL-th call on.
local function writer(name, write, from_call)
  local i = assert(STARTER.source:find(LAST, 1, true))
  local source = "__device__ unsigned int km_test_calls;\n" .. STARTER.source:sub(1, i - 1) ..
    "if (threadIdx.x == 0) {\n    y[r] = part[0];\n    if (r == 0 && atomicAdd(&km_test_calls, 1u) >= FROM_CALL) { " ..
    write .. " }\n  }" .. STARTER.source:sub(i + #LAST)
  local params = { FROM_CALL = from_call or 0, PAGE_ADDR = PAGE_ADDR }
  for p, v in pairs(STARTER.params or {}) do params[p] = v end
  return { name = name, source = source, launch = STARTER.launch, params = params }
end
local OPEN = "*(volatile unsigned long long *)PAGE_ADDR = 1ull << 62;"
local LOWER = "((volatile unsigned long long *)PAGE_ADDR)[1] -= 1ull;"
local HONEST = { name = "honest", source = STARTER.source, launch = STARTER.launch, params = STARTER.params }

-- timings kept on disk go to a fresh folder, and every record kept is seen
local CACHE = testing.tmpdir()
baseline.dir = function() return CACHE end
local kept = {}
local put = baseline.put
baseline.put = function(key, rec, dir) kept[#kept + 1] = rec return put(key, rec, dir) end

local j = assert(judge_mod.new())
local function judged(cand, opts)
  opts = opts or {}
  opts.seeds = 1 -- 4 shapes: 4 calls in verify, then the timed calls
  return j:eval(rowsum, cand, opts)
end
local function blamed(v, where)
  t.eq(v.status, "inputs_modified", v.feedback)
  t.ok(tostring(v.feedback):find("timing gate", 1, true), v.feedback)
  if where then t.ok(tostring(v.feedback):find(where, 1, true), v.feedback) end
  t.ok(page() < HUGE, "released put back")
end

t.test("a candidate that writes released in verify: inputs_modified, nothing timed is kept", function()
  local v = judged(writer("opens gates in verify", OPEN))
  blamed(v)
  t.eq(#kept, 0, "no timing kept on disk")
  local h = judged(HONEST)
  t.eq(h.status, "correct", h.feedback)
  t.ok(#kept >= 1, "the honest evaluation's reference timing is kept")
  for _, rec in ipairs(kept) do t.eq(rec.gate_timeouts, nil) end
end)

t.test("a candidate that writes released only in verify, not timed: found at the end of its evaluation", function()
  blamed(judged(writer("opens gates, untimed", OPEN), { timing = false }), "at the end of the evaluation")
  t.eq(judged(HONEST, { timing = false }).status, "correct")
end)

t.test("a candidate that starts writing in its timed calls: inputs_modified", function()
  blamed(judged(writer("opens gates when timed", OPEN, 4)))
  t.eq(judged(HONEST).status, "correct")
end)

t.test("a candidate that lowers timeouts: inputs_modified", function()
  blamed(judged(writer("lowers timeouts", LOWER)))
  t.eq(judged(HONEST).status, "correct")
end)

t.test("a write left from before an evaluation (a worker that outlived its candidate) blames no one", function()
  attack("open_gates")
  local h = judged(HONEST)
  t.eq(h.status, "correct", h.feedback)
  t.ok(page() < HUGE)
end)

----------------------------------------------------------------------------------------
-- a PyTorch eager baseline (the number speedups are divided by) timed over a written page

local kb = require "km.task.kernelbench"
if not kb.available() then
  t.skip("a PyTorch baseline over a written page", "PyTorch not available (set KM_PYTHON)")
else
  t.test("a PyTorch baseline timed over a written page fails and is not kept; measured again, it is", function()
    local RELU = testing.problem(testing.tmpdir(), "19_ReLU", { sizes = "", inputs = "torch.randn(4096, 4096)" })
    local lt = assert(task.load(RELU))
    local st = assert(j:task_state(lt))
    local sym = lt.shapes[1]
    local n = #kept
    attack("open_gates") -- as left by a candidate before; Judge:eval puts it back before baselines
    local bl = j:baselines(st, sym, { compile_mode = "off" })
    t.eq(bl.eager, nil)
    t.ok(tostring(bl.errors.eager):find("gate's page", 1, true), bl.errors.eager)
    t.eq(#kept, n, "the tampered baseline is not kept")
    t.ok(page() < HUGE)
    st.baselines = nil
    bl = j:baselines(st, sym, { compile_mode = "off" })
    t.ok(bl.eager and bl.eager.cached == false, tostring(bl.errors.eager))
    t.eq(#kept, n + 1)
    -- and a candidate on it that writes the page in verify
    local relu = testing.relu_candidate()
    local bad = { name = "relu, opens gates", launch = relu.launch, params = { PAGE_ADDR = PAGE_ADDR },
      source = relu.source:gsub("if %(i < n%)", "if (i == 0) " .. OPEN .. "\n  if (i < n)") }
    local v = j:eval(lt, bad, { seeds = 1, compile_mode = "off" })
    t.eq(v.status, "inputs_modified", v.feedback)
    local g = j:eval(lt, relu, { seeds = 1, compile_mode = "off" })
    t.eq(g.status, "correct", g.feedback)
    t.ok(g.speedup_eager and g.speedup_eager > 0, tostring(g.speedup_eager))
  end)
end

t.done()
