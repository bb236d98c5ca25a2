-- GPU: "Trust, round 3" — nothing a candidate can reach decides its verdict.
--
-- The judge runs in this process (km.judge, as a GPU worker runs it), so the test can do
-- what an attacker does with a dry run: learn where the reference keeps its state (here
-- from the problem itself, as a printf of pointers would tell a model) and come back with
-- a kernel that writes there. Each attack must fail, the reference's state must be back as
-- it was for the next candidate, and an honest candidate must stay correct.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local task = require "km.task"
local buffer = require "km.buffer"

local DIR = testing.tmpdir()
local PROB = testing.problem(DIR, "linear_state", { args = "n, m", init = "self.fc = nn.Linear(n, m)\n" ..
  'self.register_buffer("shift", torch.randn(m))\nself.extra = torch.randn(m)   # a plain tensor attribute, not in state_dict',
  returns = "self.fc(x) + self.shift + self.extra", sizes = "", inputs = "torch.randn(256, 512)", init_inputs = "512, 256" })

-- Honest: y = x W^T + b + shift + extra. The candidate has no copy of `extra` (it is not a
-- parameter): it reads it where the reference keeps it, at EXTRA. TARGET/NBYTES: a storage
-- of the reference the attack zeroes; SKIP_GEMM, SKIP_SHIFT, SKIP_EXTRA: what the attack
-- leaves out of its output while attacking, matching what the altered reference computes.
-- FROM_CALL: the attack starts at that call (0: the first); before it, the kernel is
-- honest. WRONG_SHIFT: a plain wrong answer (no attack).
local SRC = [[
#ifndef FROM_CALL
#define FROM_CALL 0
#endif
__device__ unsigned int calls;
extern "C" __global__ void lin(const float *x, const float *w, const float *b, const float *shift, float *y,
                               int m, int n, int k) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int c = calls;
  __syncthreads();
  bool attacking = false;
#ifdef TARGET
  attacking = c >= FROM_CALL;
  if (attacking) {
    unsigned long long *t = (unsigned long long *)TARGET;
    long long tid = (long long)(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    for (long long q = tid; q < NBYTES / 8; q += (long long)gridDim.x * gridDim.y * blockDim.x) t[q] = 0ull;
  }
#endif
  if (i == 0 && j == 0) atomicAdd(&calls, 1u);
  if (i >= m || j >= n) return;
  float acc = 0.f;
#ifdef SKIP_GEMM
  if (!attacking)
#endif
  for (int q = 0; q < k; q++) acc += x[i * k + q] * w[j * k + q];
  acc += b[j];
#ifdef SKIP_SHIFT
  if (!attacking)
#endif
  acc += shift[j];
#ifdef SKIP_EXTRA
  if (!attacking)
#endif
  acc += ((const float *)EXTRA)[j];
#ifdef WRONG_SHIFT
  acc -= shift[j]; /* a plain wrong answer */
#endif
  y[i * n + j] = acc;
}
]]
local LAUNCH = [[return function(k, io, s)
  local m, kk = io.x:shape()[1], io.x:shape()[2]
  local n = io.fc_weight:shape()[1]
  k.lin{ grid = { k.cdiv(n, 128), m }, block = 128 }(io.x, io.fc_weight, io.fc_bias, io.shift, io.out, m, n, kk)
end]]

local judge = assert(require("km.judge").new())
local lt = assert(task.load(PROB))
local st = assert(judge:task_state(lt))
-- the dry run: where the reference keeps each storage
local where = {}
for _, r in ipairs(assert(st.prob:truth())) do where[r[1]] = { ptr = r[2], nbytes = r[3] } end

local function defs(extra)
  local d = { EXTRA = ("%dull"):format(where["attr:extra"].ptr) }
  for k, v in pairs(extra or {}) do d[k] = v end
  return d
end
local function run(name, params, opts)
  opts = opts or {}
  opts.seeds = opts.seeds or 1
  opts.compile_mode = "off" -- eager is the baseline here; torch.compile would take minutes
  return judge:eval(lt, { name = name, source = SRC, launch = opts.launch or LAUNCH, params = params }, opts)
end
local function attack(target, skip, from)
  local d = defs { TARGET = ("%dull"):format(where[target].ptr), NBYTES = where[target].nbytes, FROM_CALL = from or 0 }
  d[skip] = 1
  return d
end

t.test("the dry run found the reference's parameter, buffer and tensor attribute", function()
  t.ok(where["state:fc.weight"] and where["state:fc.weight"].nbytes == 256 * 512 * 4, "fc.weight")
  t.ok(where["state:shift"], "shift (a registered buffer)")
  t.ok(where["attr:extra"], "extra (a plain tensor attribute)")
end)

t.test("an honest candidate is correct and timed", function()
  local v = run("honest", defs(), { timing = true })
  t.eq(v.status, "correct", v.feedback)
end)

for _, case in ipairs {
  { "state:fc.weight", "SKIP_GEMM", "no GEMM: zeroes the reference's weight (issue 16's 12.5x)" },
  { "state:shift", "SKIP_SHIFT", "zeroes the reference's registered buffer" },
  { "attr:extra", "SKIP_EXTRA", "zeroes a tensor the reference keeps as a plain attribute" },
} do
  local target, skip, what = case[1], case[2], case[3]
  t.test(what .. ": inputs_modified, state restored, the next honest candidate correct", function()
    local v = run("attack " .. target, attack(target, skip), { timing = true })
    t.eq(v.status, "inputs_modified", v.feedback)
    t.ok(v.feedback:find(target:gsub("^%a+:", ""), 1, true), v.feedback)
    local h = run("honest after " .. target, defs(), { timing = false })
    t.eq(h.status, "correct", h.feedback)
  end)
end

t.test("an attack that starts in the timed calls (unchecked ones too) fails the candidate", function()
  -- verify makes 1 call (1 shape x 1 seed); the attack starts with timing's first call
  local v = run("late attack", attack("state:fc.weight", "SKIP_GEMM", 1), { timing = true })
  t.eq(v.status, "inputs_modified", v.feedback)
  t.eq(run("honest after late", defs(), { timing = false }).status, "correct")
end)

t.test("an attack that then fails its launch does not leave the next candidate blamed", function()
  local v = run("attack then raise", attack("state:fc.weight", "SKIP_GEMM"), { timing = false,
    launch = LAUNCH:gsub("\nend%]?%]?$", "") .. "\n  error('giving up')\nend" })
  t.ok(v.status ~= "correct" and v.status ~= "error", v.status .. ": " .. tostring(v.feedback))
  local h = run("honest after raise", defs(), { timing = true })
  t.eq(h.status, "correct", h.feedback)
end)

----------------------------------------------------------------------------------------
-- failures are charged to their cause: every API entry point of launch code driven with
-- bad arguments, the failure caught (pcall), then a wrong kernel: a candidate verdict
-- (mismatch), never `error`

local WRONG = defs { WRONG_SHIFT = 1 }
local BAD_CALLS = {
  scratch_dtype = [[k.scratch("f99", 16)]],
  scratch_shape = [[k.scratch("f32", -1)]],
  scratch_shape_table = [[k.scratch("f32", { "a" })]],
  scratch_over_budget = [[k.scratch("f32", 1 << 40)]],
  scratch_zero_arg = [[k.scratch("f32", 16, 5)]],
  set_shared_name = [[k.set_shared("no_such_kernel", 1024)]],
  set_shared_bytes = [[k.set_shared("lin", 1 << 30)]],
  kernel_name = [[k.no_such_kernel{ grid = 1, block = 1 }()]],
  kernel_cfg = [[k.lin(5)]],
  kernel_stream = [[k.lin{ grid = 1, block = 1, stream = 0 }()]],
  kernel_grid = [[k.lin{ grid = -1, block = 1 }(io.x, io.fc_weight, io.fc_bias, io.shift, io.out, 1, 1, 1)]],
  kernel_block = [[k.lin{ grid = 1, block = 1 << 20 }(io.x, io.fc_weight, io.fc_bias, io.shift, io.out, 1, 1, 1)]],
  kernel_args = [[k.lin{ grid = 1, block = 1 }("x", {}, nil)]],
  kernel_arg_count = [[k.lin{ grid = 1, block = 1 }(io.x)]],
  missing_buffer = [[return io.no_such_buffer:numel()]],
  view_misuse = [[io.x:ptr()]],
  cdiv = [[k.cdiv("a", {})]],
}
for name, call in pairs(BAD_CALLS) do
  t.test("launch code catching a failed " .. name .. " then computing wrong: mismatch", function()
    local launch = LAUNCH:gsub("return function%(k, io, s%)", "return function(k, io, s)\n  pcall(function() " .. call .. " end)")
    local v = run("bad " .. name, WRONG, { timing = false, launch = launch })
    t.eq(v.status, "mismatch", v.feedback)
  end)
end

t.test("a scratch slot freed by a failed request (caught) is not tripped over later: mismatch", function()
  -- call 1 takes 64 floats at slot 1; later calls ask slot 1 for more than the budget
  -- (the old buffer was freed, and once stayed in the slot for the judge to trip on)
  local launch = LAUNCH:gsub("return function%(k, io, s%)", [[local n = 0
return function(k, io, s)
  n = n + 1
  if n == 1 then k.scratch("f32", 64) else pcall(k.scratch, "f32", 3 << 30) end]])
  local v = run("laundering scratch", WRONG, { timing = true, launch = launch })
  t.eq(v.status, "mismatch", v.feedback)
end)

----------------------------------------------------------------------------------------
-- deterministic lifetimes: every scratch buffer a candidate obtains is freed when its
-- evaluation ends

t.test("scratch is freed at the end of every evaluation: live device buffers do not grow", function()
  local launch = LAUNCH:gsub("return function%(k, io, s%)", [[return function(k, io, s)
  for i = 1, 4 do k.scratch("f32", (1 << 22) * i) end]])
  run("warm the pool", defs(), { timing = true, launch = launch })
  local n0, b0 = buffer.live()
  for i = 1, 6 do
    local v = run("scratch " .. i, defs(), { timing = i % 2 == 0, launch = launch })
    t.eq(v.status, "correct", v.feedback)
    local n, b = buffer.live()
    t.eq(n, n0, "evaluation " .. i .. ": live buffers")
    t.eq(b, b0, "evaluation " .. i .. ": live bytes")
  end
end)

----------------------------------------------------------------------------------------
-- a candidate of any size gets a verdict

t.test("a 300 MB source is a compile_error verdict, in the judge and through a pool", function()
  local big = string.rep("/* x */\n", (300 << 20) // 8)
  local v = judge:eval(lt, { name = "huge", source = big, launch = LAUNCH }, { timing = false })
  t.eq(v.status, "compile_error", v.feedback)
  t.ok(v.feedback:find("over the limit", 1, true), v.feedback)
  local pool = assert(require("km.serve.pool").pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 60 })
  local pv = pool:eval(lt, { name = "huge", source = big, launch = LAUNCH }, { timing = false })
  t.eq(pv.status, "compile_error", pv.feedback)
  local lv = pool:eval(lt, { name = "huge launch", source = SRC, launch = LAUNCH .. string.rep("-- x\n", 1 << 19) }, { timing = false })
  t.eq(lv.status, "compile_error", lv.feedback)
  pool:close()
end)

t.done()
