-- A strategy run resumes like a sweep (issue 19, item 2): the same command again never
-- repeats a finished episode nor pays the model twice — after Ctrl-C (exit 130), and on a
-- store that is already finished; --rerun forces; a compile-only episode met again by a run
-- that has a GPU is judged from its stored candidate without a model call. Model requests
-- are counted at the loopback fake server; the store is a real SQLite file.
local t = require "km.tap"
local testing = require "km.testing"
local runner = require "km.run.runner"
local task = require "km.task"

local server, _, KMRUN = testing.fake_llm_server_or_skip(t)
local DIR, STORE = server.dir, server.dir .. "/run.sqlite"
local CLIENT = { provider = "openai", base_url = server.base, model = "fake-model" }

local ANSWER = "Here it is.\n```cuda\nextern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) {\n" ..
  "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  if (r >= rows) return;\n  float s = 0.f;\n" ..
  "  for (int c = 0; c < cols; ++c) s += x[(long)r * cols + c];\n  y[r] = s;\n}\n```\n" ..
  "```lua\nreturn function(k, io, s) k.rowsum{ grid = (s.rows + 255) // 256, block = 256 }(io.x, io.y, s.rows, s.cols) end\n```"

-- t_rowsum as r_a and r_b, each naming its script of that answer: r_a answers at once; r_b's
-- first request hangs 30 s (the run is interrupted there), later ones are answered at once.
local TA = server:task("r_a", server:script("a", { ANSWER }))
local TB = server:task("r_b", server:script("b", { ANSWER }), " [[fault:hangx1:s=30]]")
local CMD = string.format("cd %s && %s implement %s %s --jobs 1 --provider openai --base-url %s --model fake-model " ..
  "--store %s --worker-stderr null", DIR, KMRUN, TA, TB, server.base, STORE)

local function requests() return #server.requests() end

local function statuses()
  local by = {}
  for _, e in ipairs(testing.episodes(STORE)) do
    by[e.task] = by[e.task] or {}
    table.insert(by[e.task], e.status)
  end
  for k, v in pairs(by) do by[k] = table.concat(v, ",") end
  return by
end

t.test("Ctrl-C, then the same command: only the interrupted episode runs again", function()
  -- in the background; SIGINT once r_a has finished and r_b's request hangs at the server
  local sh = string.format([[
    %s > %s/out 2> %s/err &
    pid=$!
    i=0
    while ! grep -q '^r_a ' %s/out 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
    i=0
    while [ "$(grep -c . %s/requests.jsonl 2>/dev/null)" -lt 2 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
    kill -INT $pid
    wait $pid
    echo $? > %s/rc]], CMD, DIR, DIR, DIR, DIR, DIR)
  os.execute(sh)
  local out, err = testing.read(DIR .. "/out") or "", testing.read(DIR .. "/err") or ""
  t.eq(tonumber(testing.read(DIR .. "/rc")), 130, out .. err)
  t.ok(err:find("1 episode(s) marked interrupted in " .. STORE .. "; the same command resumes the run", 1, true), err)
  t.eq(requests(), 2)
  local st = statuses()
  t.eq(st.r_a, "compiled")
  t.eq(st.r_b, "interrupted")

  local text, rc = testing.sh(CMD)
  t.eq(rc, 3, text) -- no GPU here: compile checks only
  t.ok(text:find("2 episodes planned, 1 already finished, 1 to run", 1, true), text)
  t.eq(requests(), 3, "r_a's model call is not paid again")
  st = statuses()
  t.eq(st.r_a, "compiled")
  t.eq(st.r_b, "interrupted,compiled")
  t.ok(text:find("summary: 0/2 correct (1 finished in earlier runs of this store)", 1, true), text)
end)

t.test("a finished store: the same command runs nothing and asks the model nothing", function()
  local text, rc = testing.sh(CMD)
  t.eq(rc, 3, text) -- the stored episodes are compile-only, still not judged
  t.ok(text:find("2 episodes planned, 2 already finished, 0 to run", 1, true), text)
  t.eq(requests(), 3)
  t.eq(statuses().r_a, "compiled")
end)

t.test("a run with a GPU judges compile-only episodes from their stored code, without a model call", function()
  local judged = {}
  local pool = testing.fake_pool(function(tk, cand)
    judged[#judged + 1] = tk.name
    local ok = cand.source:find("rowsum", 1, true) ~= nil
    return { status = ok and "correct" or "compile_error", feedback = "correct (fake)", speedup = 2, speedup_over = "cuda_reference",
      timing = { candidate = { median = 0.5 }, reference = { median = 1 } } }
  end)
  local tasks = { assert(task.load(TA)), assert(task.load(TB)) }
  local res = testing.sweep { strategy = "implement", tasks = tasks, store = STORE, argv = { "--store", STORE },
    args = { quiet = true }, models = { "fake-model" }, pool = pool, name = "implement", client = CLIENT }
  t.eq(res.ran, 2)
  t.eq(res.correct, 2)
  t.eq(#judged, 2)
  t.eq(requests(), 3, "no model call")
  local st = statuses()
  t.eq(st.r_a, "compiled,correct")
  t.eq(st.r_b, "interrupted,compiled,correct")
  -- the judged episode holds the earlier one's model turn, then the verdict; its summary
  -- carries the model's cost and names the episode it was judged from
  local eps = testing.episodes(STORE, { task = "r_a" })
  local ep = eps[#eps]
  local kinds = {}
  for _, s in ipairs(ep.steps) do kinds[#kinds + 1] = s.kind end
  kinds = table.concat(kinds, ",")
  t.ok(kinds:find("model_call", 1, true) and kinds:match("verdict,note,candidate,verdict"), kinds)
  t.eq(ep.summary.model_calls, 1)
  t.eq(ep.summary.judged_from, eps[1].uuid)
  t.eq(ep.final.verdict.status, "correct")
  -- and with a GPU again, nothing is left to do
  res = testing.sweep { strategies = { { name = "implement", fn = function() error("must not run") end } },
    tasks = tasks, store = STORE, argv = { "--store", STORE }, args = { quiet = true }, models = { "fake-model" },
    pool = pool, name = "implement", client = CLIENT }
  t.eq(res.ran, 0)
  t.eq(res.before.correct, 2)
  t.eq(runner.exit_status(res, pool), 0, "every planned episode correct, in earlier runs")
end)

t.test("--rerun all forces the strategy again", function()
  local text, rc = testing.sh(CMD .. " --rerun all")
  t.eq(rc, 3, text)
  t.ok(text:find("0 already finished, 2 to run (again: 2 correct)", 1, true), text)
  t.eq(requests(), 5, "one model call per episode, run again")
end)

server.stop()
t.done()
