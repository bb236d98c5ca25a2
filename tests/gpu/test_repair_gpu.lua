-- GPU: the repair loop with the real evaluator on three tasks, driven by the fake model
-- server: a first answer with a planted bug, then the task's starter as the fix.
local t = require "km.tap"
t.require_gpu()
local testing = require "km.testing"
local task = require "km.task"
local eval = require "km.serve.pool"
local prompt = require "km.run.prompt"

local server, ROOT = testing.fake_llm_server_or_skip(t)

-- Bugs a model could plausibly write, planted in each starter: an off-by-one bound, a
-- normalisation that misses the last column, a forgotten bias.
local BUGS = {
  l1_relu = { "i < n;", "i < n - 1;" },
  l1_softmax = { "j < cols; j += BLOCK) s +=", "j < cols - 1; j += BLOCK) s +=" },
  l2_gemm_bias_relu = { "fmaxf(acc[i] + bv, 0.0f)", "fmaxf(acc[i], 0.0f)" },
}

local tasks, dir = {}, server.dir
for name, bug in pairs(BUGS) do
  local d = dir .. "/" .. name
  testing.copy_tree(ROOT .. "/tasks/" .. name, d)
  local st = assert(task.starter(assert(task.load(d))))
  local buggy = st.source:gsub(bug[1]:gsub("%p", "%%%0"), bug[2], 1)
  local sp = server:script(name, { prompt.candidate_text { source = buggy, launch = st.launch }, prompt.candidate_text(st) })
  -- the fake model finds its script through the description
  testing.write(d .. "/description.md", testing.read(d .. "/description.md") .. "\n[[script:" .. sp .. "]]\n")
  tasks[#tasks + 1] = { name = name, task = assert(task.load(d)), planted = buggy ~= st.source }
end
table.sort(tasks, function(a, b) return a.name < b.name end)

local pool = assert(eval.pool { gpus = { 0 }, timeout = 60 })
local path = dir .. "/repair.sqlite"
local list = {}
for i, x in ipairs(tasks) do list[i] = x.task end
local res = testing.sweep { strategy = "repair", tasks = list, store = path, pool = pool, fresh = true, guidance = true,
  client = { provider = "openai", base_url = server.base, model = "fake-model" } }
pool:close()

for _, x in ipairs(tasks) do
  t.test(x.name .. ": the planted bug is caught, the fix is verified, the trajectory holds both rounds", function()
    t.ok(x.planted, "the bug was planted")
    local eps = testing.episodes(path, { task = x.name })
    local e = eps[#eps]
    local verdicts = {}
    for _, s in ipairs(e.steps) do if s.kind == "verdict" then verdicts[#verdicts + 1] = s.payload end end
    t.note(x.name .. ": " .. verdicts[1].status .. " then " .. tostring(verdicts[2] and verdicts[2].status) ..
      (verdicts[2] and verdicts[2].speedup and string.format(" (%.2fx)", verdicts[2].speedup) or ""))
    t.ok(verdicts[1].status == "mismatch" or verdicts[1].status == "nan_inf", verdicts[1].status)
    t.eq(verdicts[2].status, "correct")
    t.eq(e.status, "correct")
    t.eq(e.summary.rounds_to_correct, 2)
  end)
end
t.eq(res.correct, #tasks)
server.stop()
t.done()
