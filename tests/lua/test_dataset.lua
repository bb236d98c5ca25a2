-- km.data.dataset and km.data.dedup: suite stats, near-duplicate tasks (synthetic copies and the real
-- tasks/), stratified sampling of a synthetic store, and `kmrun export --sample`.
local t = require "km.tap"
local testing = require "km.testing"
local task = require "km.task"
local dataset = require "km.data.dataset"
local dedup = require "km.data.dedup"
local store = require "km.store"
local json = require "km.json"
local wall = require("km.timing").wall

local _, KMRUN = testing.paths()
local dir = testing.tmpdir()
local sh, write = testing.run, testing.write -- sh: stdout, stderr, exit status

local function sum(list)
  local s = 0
  for _, e in ipairs(list) do s = s + e.count end
  return s
end

----------------------------------------------------------------------------------------
-- stats

t.test("stats on tasks/: every task counted once per level, category and form combination", function()
  local tasks, errors = task.list("tasks")
  t.ok(#tasks > 0, "tasks/ has tasks")
  local s = dataset.task_stats(tasks)
  t.eq(s.tasks, #tasks)
  t.eq(sum(s.level), #tasks, "levels")
  t.eq(sum(s.category), #tasks, "categories")
  t.eq(sum(s.forms), #tasks, "form combinations")
  t.eq(sum(s.params_per_task), #tasks, "parameters per task")
  local ref
  for _, e in ipairs(s.form) do if e.key == "reference" then ref = e end end
  t.eq(ref.count, #tasks, "every task has a reference")
  t.near(ref.pct, 100, 1e-9)
  for i = 2, #s.category do t.ok(s.category[i - 1].count >= s.category[i].count, "categories by count") end
  t.ok(s.starters.count <= #tasks and s.tunable.count <= s.starters.count)
  local f32
  for _, e in ipairs(s.dtype) do if e.key == "f32" then f32 = e end end
  t.ok(f32 and f32.count > 0, "some task reads f32")
  local text = dataset.format_stats(s)
  t.ok(text:find("by category", 1, true) and text:find("with a starter", 1, true), text)

  local out, err, rc = sh(KMRUN .. " tasks stats tasks --json")
  t.eq(rc, #errors == 0 and 0 or 1, err)
  local j = assert(json.decode(out))
  t.eq(j.tasks, #tasks)
  t.eq(sum(j.level), #tasks)
  out, err, rc = sh(KMRUN .. " tasks stats")
  t.ok(out:find("by input dtype", 1, true), out .. err)
end)

t.test("stats of a hand-made suite", function()
  local function fake(name, level, cat, desc, math_, dtypes, params)
    local inputs = {}
    for i, d in ipairs(dtypes) do inputs[i] = { name = "x" .. i, dtype = d } end
    return { name = name, level = level, category = cat, description_text = desc, math_text = math_, inputs = inputs,
      starter = params and { dir = "starter", params = params } or nil }
  end
  local s = dataset.task_stats {
    fake("a", 1, "gemm", "d", "m", { "f32" }, { BLOCK = { 1 }, TILE = { 2 } }),
    fake("b", 1, "gemm", nil, "m", { "f32", "i32", "i32" }, {}),
    fake("c", 2, "conv", "d", nil, { "f16" }, nil),
    fake("d", 3, "gemm", nil, nil, { "f32" }, { BLOCK = { 1 } }),
  }
  local function get(list, key)
    for _, e in ipairs(list) do if e.key == key then return e end end
  end
  t.eq(get(s.level, "L1").count, 2)
  t.eq(get(s.category, "gemm").count, 3)
  t.near(get(s.category, "gemm").pct, 75, 1e-9)
  t.eq(get(s.forms, "description+math+reference").count, 1)
  t.eq(get(s.forms, "math+reference").count, 1)
  t.eq(get(s.forms, "reference").count, 1)
  t.eq(get(s.form, "math").count, 2)
  t.eq(get(s.dtype, "i32").count, 1, "a task counts once per dtype")
  t.eq(get(s.dtype, "f32").count, 3)
  t.eq(s.starters.count, 3)
  t.eq(s.tunable.count, 2)
  t.eq(s.tunable.params, 3)
  t.eq(get(s.params_per_task, "0").count, 2)
  t.eq(get(s.param, "BLOCK").count, 2)
end)

----------------------------------------------------------------------------------------
-- dedup

t.test("normalising: comments go, code identifiers are abstracted, keywords and members stay", function()
  local a = dedup.tokens("// a comment\nextern \"C\" __global__ void relu(const float *x, float *y, int n) {\n" ..
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; /* index */ if (i < n) y[i] = fmaxf(x[i], 0.0f); }", "code")
  local b = dedup.tokens("extern \"C\" __global__ void   my_relu(const float *input, float *out, int count) {" ..
    "int idx = blockIdx.x * blockDim.x + threadIdx.x; if (idx < count) out[idx] = fmaxf(input[idx], 0.0); }", "code")
  t.eq(table.concat(a, " "), table.concat(b, " "), "a renamed copy has the same code tokens")
  local s = table.concat(a, " ")
  t.ok(not s:find("comment") and not s:find("index"), s)
  t.ok(s:find("blockidx . x", 1, true) and s:find("fmaxf", 1, true) and s:find("__global__", 1, true), s)
  t.ok(s:find("0.0", 1, true), "numbers kept without the f suffix: " .. s)
  local w = dedup.tokens("Softmax over the LAST dimension, in `float32` (1e-3).", "text")
  t.eq(table.concat(w, " "), "softmax over the last dimension in float32 1e 3")
  local set = dedup.shingles({ "a", "b", "c", "d", "e" }, 4, "x:")
  t.ok(set["x:a b c d"] and set["x:b c d e"])
  set = dedup.shingles({ "a", "b" }, 4)
  t.ok(set["a b"], "a short stream is one shingle")
  t.raises(function() dedup.tokens("x", "prose") end, "kind must be")
end)

t.test("MinHash: deterministic, 64-bit, and close to the exact Jaccard", function()
  local a, b = {}, {}
  for i = 1, 300 do a["s" .. i] = true end
  for i = 151, 450 do b["s" .. i] = true end
  local exact = dedup.jaccard(a, b)
  t.near(exact, 150 / 450, 1e-12)
  local sa, sb = dedup.signature(a), dedup.signature(b)
  t.eq(#sa, 128)
  local sa2 = dedup.signature(a)
  for i = 1, #sa do t.eq(sa[i], sa2[i], "signature slot " .. i) end
  t.near(dedup.estimate(sa, sb), exact, 0.15)
  t.eq(dedup.estimate(sa, sa), 1.0)
  t.eq(dedup.jaccard({}, {}), 1.0)
  -- the hash is the full 64-bit FNV-1a + splitmix64, the same on every machine
  t.eq(dedup.hash(""), dedup.mix(0xcbf29ce484222325))
  t.ok(dedup.hash("abc") ~= dedup.hash("abd"))
  local other = dedup.signature(a, { seed = 7 })
  local same = 0
  for i = 1, #sa do if other[i] == sa[i] then same = same + 1 end end
  t.ok(same < 10, "another seed gives other permutations")
end)

-- A temp suite written here (so it does not depend on which tasks tasks/ holds): a fused
-- GEMM task, a near copy of it (a few words of the description changed, identifiers in the
-- reference renamed), and an unrelated task (tasks/l1_relu).
local GEMM_TASK = [[
return {
  name = "NAME", level = 2, category = "gemm",
  description = "description.md",
  math = "y[m,n] = max(0, bias[n] + sum_k x[m,k] * w[k,n])",
  reference = { source = "reference.cu", launch = "reference.lua" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "w", dtype = "f32", shape = { "k", "n" }, init = { "uniform", -1, 1 } },
    { name = "bias", dtype = "f32", shape = { "n" }, init = { "uniform", -0.25, 0.25 } },
  },
  outputs = { { name = "y", dtype = "f32", shape = { "m", "n" } } },
  shapes = { { m = 2048, n = 2048, k = 2048 }, { m = 1, n = 37, k = 1 }, { m = 127, n = 31, k = 129 } },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(m*k + k*n + n + m*n)", flops = "2*m*n*k",
}
]]
local GEMM_DESC = [[
Fused linear layer with bias and ReLU: a matrix product followed by a per-column bias and
a rectified linear unit, all in float32.

Inputs (row-major, contiguous):
- `x`: float32 `[m, k]`, the activations.
- `w`: float32 `[k, n]`, the weight matrix (already laid out as `k` rows of `n` columns,
  so the product is `x @ w`, no transpose).
- `bias`: float32 `[n]`, added to every row.

Output:
- `y`: float32 `[m, n]`, `y[i, j] = max(0, bias[j] + sum_{p < k} x[i, p] * w[p, j])`.

Element `(i, j)` of a `[rows, cols]` buffer is at offset `i * cols + j`. Any summation
order is acceptable (results are compared with atol = rtol = 1e-3). `m`, `n`, `k` can be any
size from 1 up (the timed shape is m = n = k = 2048; others include 1, odd and prime
sizes), so handle partial tiles.
]]
local GEMM_REF = [[
// Naive reference: one thread per output element, float accumulation in k order.
extern "C" __global__ void gemm_bias_relu_ref(const float *x, const float *w, const float *bias, float *y,
                                              int m, int n, int k) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += x[(size_t)i * k + p] * w[(size_t)p * n + j];
  float v = acc + bias[j];
  y[(size_t)i * n + j] = v > 0.0f ? v : 0.0f;
}
]]
local GEMM_LAUNCH = [[
return function(k, io, s)
  k.gemm_bias_relu_ref{ grid = { k.cdiv(s.n, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(io.x, io.w, io.bias, io.y, s.m, s.n, s.k)
end
]]

local function make_suite()
  local sdir = dir .. "/suite"
  assert(os.execute("rm -rf " .. sdir .. " && mkdir -p " .. sdir .. "/l2_gemm_bias_relu " .. sdir ..
    "/l2_gemm_bias_relu_copy && cp -r tasks/l1_relu " .. sdir))
  local o, c = sdir .. "/l2_gemm_bias_relu/", sdir .. "/l2_gemm_bias_relu_copy/"
  write(o .. "task.lua", (GEMM_TASK:gsub("NAME", "l2_gemm_bias_relu")))
  write(o .. "description.md", GEMM_DESC)
  write(o .. "reference.cu", GEMM_REF)
  write(o .. "reference.lua", GEMM_LAUNCH)
  write(c .. "task.lua", (GEMM_TASK:gsub("NAME", "l2_gemm_bias_relu_copy")))
  write(c .. "description.md", (GEMM_DESC:gsub("Fused linear layer", "Fused dense layer")
    :gsub("the activations", "the input batch"):gsub("added to every row", "broadcast over the rows")))
  write(c .. "reference.cu", (GEMM_REF:gsub("acc", "total"):gsub("gemm_bias_relu_ref", "linear_relu_kernel")))
  write(c .. "reference.lua", (GEMM_LAUNCH:gsub("gemm_bias_relu_ref", "linear_relu_kernel")))
  return sdir
end

t.test("dedup finds a near copy of a task and not an unrelated one", function()
  local sdir = make_suite()
  local tasks, errors = task.list(sdir)
  t.eq(#errors, 0, table.concat(errors, "\n"))
  t.eq(#tasks, 3)
  local docs = {}
  for i, x in ipairs(tasks) do docs[i] = dedup.document(x) end
  local byname = {}
  for _, d in ipairs(docs) do byname[d.name] = d end
  local orig, copy, soft = byname.l2_gemm_bias_relu, byname.l2_gemm_bias_relu_copy, byname.l1_relu
  local j = dedup.jaccard(orig.set, copy.set)
  t.ok(j >= 0.8, "copy similarity " .. j)
  t.ok(j < 1, "the copy is not identical")
  t.ok(dedup.jaccard(orig.set, soft.set) < 0.3, "unrelated similarity " .. dedup.jaccard(orig.set, soft.set))
  t.near(dedup.estimate(orig.sig, copy.sig), j, 0.15)

  local r = dedup.find(docs, { threshold = 0.8 })
  t.eq(#r.pairs, 1)
  t.eq(r.pairs[1].a, "l2_gemm_bias_relu")
  t.eq(r.pairs[1].b, "l2_gemm_bias_relu_copy")
  t.eq(r.pairs[1].similarity, j)
  t.eq(#r.clusters, 1)
  local gemm
  for _, c in ipairs(r.categories) do if c.category == "gemm" then gemm = c end end
  t.eq(gemm.tasks, 2)
  t.eq(gemm.largest, 2)
  t.eq(gemm.share, 1.0)

  local out, err, rc = sh(KMRUN .. " tasks dedup " .. sdir .. " --json")
  t.eq(rc, 0, err)
  local jr = assert(json.decode(out))
  t.eq(#jr.pairs, 1)
  t.eq(jr.pairs[1].similarity, j)
  out, err, rc = sh(KMRUN .. " tasks dedup " .. sdir .. " --threshold 0.8")
  t.eq(rc, 0, err)
  t.ok(out:find("l2_gemm_bias_relu%s+l2_gemm_bias_relu_copy"), out)
  t.ok(out:find("dominated by one template", 1, true), out)
  out, err, rc = sh(KMRUN .. " tasks dedup " .. sdir .. " --threshold 2")
  t.eq(rc, 2, "a threshold outside [0, 1] is a usage error")
end)

t.test("dedup on tasks/ runs in seconds; pairs sorted, verified and above the threshold", function()
  local t0 = wall()
  local out, err, rc = sh(KMRUN .. " tasks dedup tasks --json --threshold 0.3")
  local secs = wall() - t0
  t.ok(rc == 0 or rc == 1, err)
  t.ok(secs < 5, "took " .. secs .. " s")
  local r = assert(json.decode(out))
  t.ok(r.tasks > 0)
  for i, p in ipairs(r.pairs) do
    t.ok(p.similarity >= 0.3, "above the threshold")
    if i > 1 then t.ok(r.pairs[i - 1].similarity >= p.similarity, "most similar first") end
  end
  local n = 0
  for _, c in ipairs(r.categories) do
    n = n + c.tasks
    t.ok(c.largest >= 1 and c.largest <= c.tasks)
  end
  t.eq(n, r.tasks)
  -- the same answer twice
  local out2 = sh(KMRUN .. " tasks dedup tasks --json --threshold 0.3")
  t.eq(out2, out)
  out, err, rc = sh(KMRUN .. " tasks dedup")
  t.ok(out:find("template domination", 1, true), out .. err)
end)

----------------------------------------------------------------------------------------
-- episodes: buckets, filters, sampling

t.test("failure and speedup buckets", function()
  local function fb(modes, status)
    return dataset.failure_bucket { summary = { failure_modes = modes }, status = status, correct = status == "correct" }
  end
  t.eq(fb({ correct = 1 }, "correct"), "clean")
  t.eq(fb({ compiled = 2 }, "compiled"), "clean")
  t.eq(fb({}, "correct"), "clean")
  t.eq(fb({ compile_error = 2, correct = 1 }, "correct"), "repaired-compile")
  t.eq(fb({ load_error = 1, correct = 1 }, "correct"), "repaired-compile")
  t.eq(fb({ compile_error = 1, mismatch = 1, correct = 1 }, "correct"), "repaired-numeric")
  t.eq(fb({ nan_inf = 1, correct = 1 }, "correct"), "repaired-numeric")
  t.eq(fb({ compile_error = 1, crashed = 1, correct = 1 }, "correct"), "repaired-other")
  t.eq(fb({ timeout = 1, mismatch = 1, correct = 1 }, "correct"), "repaired-numeric")
  t.eq(fb({ mismatch = 3 }, "mismatch"), "failed-numeric")
  t.eq(fb(nil, "launch_error"), "failed-other")
  t.eq(dataset.failure_bucket { summary = {} }, "clean")
  local cases = { { 0.5, "<1" }, { 1, "1-1.5" }, { 1.49, "1-1.5" }, { 1.5, "1.5-2" }, { 2, "2-4" }, { 3.99, "2-4" },
    { 4, ">=4" }, { 100, ">=4" }, { nil, "none" }, { 0 / 0, "none" } }
  for _, c in ipairs(cases) do t.eq(dataset.speedup_bucket(c[1]), c[2], tostring(c[1])) end
  t.eq(table.concat(assert(dataset.parse_keys("category, forms,failure,speedup,category")), ","), "category,forms,failure,speedup")
  local k, err = dataset.parse_keys("category,colour")
  t.eq(k, nil)
  t.ok(err:find("colour", 1, true))
end)

-- A synthetic store shaped as km.run.runner writes it.
local MIX = {
  -- n, category, forms, failure_modes, final status, speedup, reasoning chars, model calls
  { 12, "gemm", { "description", "math" }, { correct = 1 }, "correct", 1.2, 100, 1 },
  { 4, "elementwise", { "math", "description" }, { compile_error = 1, correct = 1 }, "correct", 2.5, 300, 2 },
  { 3, "reduction", { "reference" }, { compile_error = 1, mismatch = 2, correct = 1 }, "correct", 0.8, 800, 4 },
  { 2, "reduction", { "reference" }, { mismatch = 3 }, "mismatch", nil, 500, 3 },
  { 1, "attention", { "description" }, { timeout = 1, correct = 1 }, "correct", 5.0, 50000, 2 },
  { 1, "conv", { "description" }, { correct = 1 }, "correct", 1.1, 0, 0 }, -- offline: no model turns
}
local N_EPISODES = 23

local function make_store()
  local path = dir .. "/run.sqlite"
  os.remove(path)
  local db = assert(store.open(path))
  local run = assert(db:begin_run { name = "synthetic" })
  local k = 0
  for _, m in ipairs(MIX) do
    for _ = 1, m[1] do
      k = k + 1
      local name = string.format("l1_%s_%02d", m[2], k)
      local ep = assert(db:begin_episode(run, { task = name, strategy = "repair", model = "m1", rep = 1 }))
      local msgs = { { role = "system", content = "You write CUDA kernels." }, { role = "user", content = "Implement " .. name } }
      db:append(ep, "prompt", { messages = msgs })
      local cand = { name = name .. "/c", source = "extern \"C\" __global__ void k() {}", launch = "return function() end", params = {} }
      for c = 1, m[8] do
        local reply = { content = "```cuda\n" .. cand.source .. "\n```\n```lua\n" .. cand.launch .. "\n```",
          reasoning = string.rep("r", m[7]), usage = { prompt_tokens = 100 * c, completion_tokens = 50 } }
        db:append(ep, "model_call", { messages = msgs, opts = { temperature = 0 }, reply = reply, reasoning_chars = m[7],
          usage = reply.usage, latency_ms = 10, provider = "fake", model = "m1" })
        local status = c == m[8] and m[5] or "compile_error"
        db:append(ep, "candidate", cand)
        db:append(ep, "verdict", { status = status, speedup = c == m[8] and m[6] or nil })
        local nm = {}
        for i, x in ipairs(msgs) do nm[i] = x end
        nm[#nm + 1] = { role = "assistant", content = reply.content }
        nm[#nm + 1] = { role = "user", content = "It does not compile: fix it." }
        msgs = nm
      end
      local verdict = { status = m[5], speedup = m[6] }
      db:finish_episode(ep, m[5] == "correct" and "correct" or "failed", {
        final = { candidate = cand, verdict = verdict },
        summary = { status = m[5], speedup = m[6], level = 1, category = m[2], forms = m[3], evals = m[8],
          model_calls = m[8], failure_modes = m[4], tokens = { prompt = 100, completion = 50 } } })
    end
  end
  db:finish_run(run, "finished")
  db:close()
  return path
end

local STORE = make_store()

local function records(filters)
  local db = assert(store.open(STORE, { readonly = true }))
  local recs = {}
  for _, row in ipairs(db:episodes {}) do
    local rec = dataset.examine(db:episode(row.id))
    if dataset.passes(rec, filters) then recs[#recs + 1] = rec end
  end
  db:close()
  return recs
end

-- Round-robin balance: a stratum not drawn in full has at least as many drawn as any other, less one.
local function balanced(rep)
  local most = 0
  for _, s in ipairs(rep.strata) do most = math.max(most, s.drawn) end
  for _, s in ipairs(rep.strata) do
    if s.drawn < s.size and s.drawn < most - 1 then return false, s.key end
  end
  return true
end

t.test("examine and the filters", function()
  local all = records()
  t.eq(#all, N_EPISODES)
  local r = all[13] -- the first elementwise episode
  t.eq(r.summary.category, "elementwise")
  t.eq(r.model_calls, 2)
  t.eq(r.max_reasoning, 300)
  t.ok(r.correct)
  t.eq(r.speedup, 2.5)
  t.eq(dataset.stratum(r, { "category", "forms", "failure", "speedup" }),
    "category=elementwise forms=description+math failure=repaired-compile speedup=2-4")
  t.eq(#records { verified = true }, N_EPISODES - 2)
  t.eq(#records { min_speedup = 1.2 }, 12 + 4 + 1)
  t.eq(#records { max_reasoning = 1000 }, N_EPISODES - 1)
  t.eq(#records { verified = true, min_speedup = 1, max_reasoning = 1000 }, 12 + 4 + 1)
end)

t.test("sampling: round-robin across strata, no stratum dominates", function()
  local recs = records { verified = true }
  local picked, rep = dataset.sample(recs, { n = 8, keys = { "category" }, seed = 1 })
  t.eq(#picked, 8)
  t.eq(rep.drawn, 8)
  t.eq(#rep.strata, 5)
  local drawn = {}
  for _, s in ipairs(rep.strata) do drawn[s.key] = s.drawn end
  t.eq(drawn["category=attention"], 1)
  t.eq(drawn["category=conv"], 1)
  t.ok(drawn["category=gemm"] <= 2, "gemm is 12 of 21 but gets at most 2 of 8")
  t.ok(balanced(rep))
  local n = 0
  for _, s in ipairs(rep.strata) do n = n + s.drawn end
  t.eq(n, 8)
  -- every drawn record belongs to its stratum, and none twice
  local seen = {}
  for _, r in ipairs(picked) do t.ok(not seen[r.id], "drawn once") seen[r.id] = true end
  -- all four keys
  picked, rep = dataset.sample(recs, { n = 10, keys = { "category", "forms", "failure", "speedup" }, seed = 5 })
  t.eq(#picked, 10)
  t.ok(balanced(rep))
  local text = dataset.format_report(rep)
  t.ok(text:find("failure=repaired-numeric", 1, true), text)
  -- more than there is: everything, once
  picked, rep = dataset.sample(recs, { n = 1000, keys = { "failure" } })
  t.eq(#picked, #recs)
  t.raises(function() dataset.sample(recs, { n = -1 }) end, "non-negative")
end)

t.test("sampling is deterministic for a seed", function()
  local recs = records()
  local function ids(seed)
    local picked = dataset.sample(recs, { n = 9, keys = { "category", "failure" }, seed = seed })
    local l = {}
    for i, r in ipairs(picked) do l[i] = r.id end
    return table.concat(l, ",")
  end
  t.eq(ids(42), ids(42))
  t.eq(ids(7), ids(7))
  local differ = false
  for s = 1, 5 do differ = differ or ids(s) ~= ids(s + 100) end
  t.ok(differ, "other seeds draw other episodes")
end)

local function check_lines(path, want_n)
  local n = 0
  for line in io.lines(path) do
    n = n + 1
    local obj = assert(json.decode(line), "line " .. n .. " is JSON")
    t.eq(getmetatable(obj.messages), json.array_mt, "messages is an array")
    t.ok(#obj.messages >= 2)
    t.eq(obj.messages[#obj.messages].role, "assistant", "ends with the assistant")
    t.ok(obj.messages[#obj.messages].content:find("__global__", 1, true))
    t.eq(obj.kmrun, nil, "no key the fine-tuning API refuses")
  end
  if want_n then t.eq(n, want_n, path) end
  return n
end

t.test("kmrun export --sample --stratify: balanced, deterministic, valid JSON lines", function()
  local out1, out2 = dir .. "/a.jsonl", dir .. "/b.jsonl"
  local cmd = KMRUN .. " export " .. STORE .. " --format sft --verified --sample 8 --stratify category,forms,failure,speedup" ..
    " --seed 3 --report --meta " .. dir .. "/a.meta.jsonl --out "
  local _, err, rc = sh(cmd .. out1)
  t.eq(rc, 0, err)
  t.ok(err:find("stratified by category,forms,failure,speedup, seed 3: 8 of 20", 1, true), err)
  t.ok(err:find("8 episode(s) written", 1, true), err)
  check_lines(out1, 8)
  local _, err2 = sh(cmd .. out2)
  t.eq(task.read_file(out1), task.read_file(out2), "the same seed, the same lines")
  t.eq(err2, err)
  -- strata in the meta file, line for line; the report's drawn counts match the lines
  local per, nmeta = {}, 0
  for line in io.lines(dir .. "/a.meta.jsonl") do
    local o = json.decode(line)
    nmeta = nmeta + 1
    t.eq(o.line, nmeta)
    per[o.stratum] = (per[o.stratum] or 0) + 1
    t.eq(o.status, "correct")
  end
  t.eq(nmeta, 8)
  for key, n in pairs(per) do
    local row = err:match("\n  " .. key:gsub("%p", "%%%0") .. "%s+(%d+%s+%d+)")
    t.ok(row, "stratum " .. key .. " in the report")
    t.eq(tonumber(row:match("(%d+)$")), n, key)
  end
  -- filters apply before sampling
  local out3 = dir .. "/c.jsonl"
  _, err, rc = sh(KMRUN .. " export " .. STORE .. " --sample 50 --stratify speedup --min-speedup 2 --max-reasoning 1000" ..
    " --meta " .. out3 .. ".meta --out " .. out3)
  t.eq(rc, 0, err)
  t.eq(check_lines(out3), 4)
  for line in io.lines(out3 .. ".meta") do
    local o = json.decode(line)
    t.ok(o.speedup >= 2 and o.max_reasoning_chars <= 1000)
  end
  -- direct format with sampling
  _, err, rc = sh(KMRUN .. " export " .. STORE .. " --format direct --sample 5 --stratify category --out " .. out3)
  t.eq(rc, 0, err)
  check_lines(out3, 5)
  -- bad options
  _, err, rc = sh(KMRUN .. " export " .. STORE .. " --sample 5 --stratify colour")
  t.eq(rc, 2)
  t.ok(err:find("colour", 1, true), err)
  _, _, rc = sh(KMRUN .. " export " .. STORE .. " --sample many")
  t.eq(rc, 2)
end)

t.test("kmrun export without sampling keeps its formats", function()
  local out = dir .. "/all.jsonl"
  local _, err, rc = sh(KMRUN .. " export " .. STORE .. " --out " .. out)
  t.eq(rc, 0, err)
  check_lines(out, N_EPISODES - 3) -- sft is training data: verified episodes only by default
  _, err, rc = sh(KMRUN .. " export " .. STORE .. " --all --out " .. out)
  t.eq(rc, 0, err)
  check_lines(out, N_EPISODES - 1) -- --all: failed ones too; the offline episode has no model turns
  -- the sft example is the last call's conversation plus its reply
  local first = json.decode(io.lines(out)())
  t.eq(#first.messages, 3)
  _, err, rc = sh(KMRUN .. " export " .. STORE .. " --format direct --verified --out " .. out)
  t.eq(rc, 0, err)
  check_lines(out, N_EPISODES - 3)
  _, err, rc = sh(KMRUN .. " export " .. STORE .. " --format jsonl --out " .. out)
  t.eq(rc, 0, err)
  local n = 0
  for line in io.lines(out) do
    n = n + 1
    local ep = assert(json.decode(line))
    t.ok(ep.steps and ep.summary)
  end
  t.eq(n, N_EPISODES)
end)

os.execute("rm -rf " .. dir)
t.done()
