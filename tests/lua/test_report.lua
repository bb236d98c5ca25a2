-- km.report and `kmrun report`: metrics by hand-computed values, JSON, text, self-contained
-- HTML with six SVG charts, strategies and models kept apart, the fast_p curve, pass@k over
-- repeats with intervals, the per-task map, CSV, empty and missing stores, and a
-- headless-Chromium render.
local t = require "km.tap"
local store = require "km.store"
local json = require "km.json"
local report = require "km.report"

local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
local ROOT = arg[0]:match("^(.*)/tests/lua/") or "."

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.*)rc=(%d+)\n$")
  return body, tonumber(rc)
end

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- One episode as km.run.runner writes it: episodes.status, final = { candidate, verdict }, summary.
-- e = { task, level, category, verdict status (nil: strategy error), speedup, rounds,
--       compile_ok_first, prompt tokens, completion tokens, dollars, gpu seconds, failure modes, roofline }
local function write_episode(db, run, e, opts)
  opts = opts or {}
  local ep = assert(db:begin_episode(run, { task = e[1], strategy = opts.strategy or "repair", model = opts.model or "m1", rep = opts.rep }))
  assert(db:append(ep, "note", { text = "synthetic" }))
  if opts.unfinished then return ep end
  local vs = e[4]
  local status = vs == "correct" and "correct" or (vs and "failed" or "error")
  local verdict = vs and { status = vs, speedup = e[5], speedup_baseline = e[5] and e[5] / 2,
    roofline = e[13] and { fraction = e[13] }, feedback = "..." }
  local evals = 0
  for _, c in pairs(e[12]) do evals = evals + c end
  assert(db:finish_episode(ep, status, {
    final = vs and { candidate = { name = e[1], source = "extern \"C\" __global__ void k() {}", launch = "return function() end" },
      verdict = verdict } or nil,
    summary = { status = vs, speedup = e[5], speedup_baseline = e[5] and e[5] / 2, roofline = e[13],
      level = e[2], category = e[3], forms = { "description", "math" }, evals = evals, model_calls = evals,
      compile_ok_first = e[7], rounds_to_correct = e[6], failure_modes = e[12], seconds = 1.5,
      gpu_seconds = e[11], tokens = { prompt = e[8], completion = e[9] }, dollars = e[10], requests = evals },
  }))
  return ep
end

-- 8 final episodes: 5 correct (speedups 2.5, 0.8, 1.2, 4.0, 1.6), 2 failed, 1 strategy error.
local EPS = {
  { "l1_a", 1, "elementwise", "correct", 2.5, 1, true, 1000, 200, 0.01, 2, { correct = 1 }, 0.8 },
  { "l1_b", 1, "elementwise", "correct", 0.8, 3, false, 3000, 600, 0.03, 6, { compile_error = 1, mismatch = 1, correct = 1 }, 0.4 },
  { "l1_c", 1, "reduction", "mismatch", nil, nil, true, 5000, 1000, 0.05, 10, { mismatch = 5 }, nil },
  { "l2_a", 2, "matmul", "correct", 1.2, 2, true, 2000, 400, 0.02, 4, { mismatch = 1, correct = 1 }, 0.5 },
  { "l2_b", 2, "matmul", "correct", 4.0, 1, true, 1000, 200, 0.01, 2, { correct = 1 }, 0.9 },
  { "l3_a", 3, "attention", "compile_error", nil, nil, false, 4000, 800, 0.04, 0, { compile_error = 4 }, nil },
  { "l3_b", 3, "reduction", nil, nil, nil, nil, 0, 0, 0, 0, {}, nil },
  { "l3_c", 3, "attention", "correct", 1.6, 4, false, 6000, 1200, 0.06, 8, { compile_error = 2, mismatch = 1, correct = 1 }, 0.3 },
}

-- Two files: the second holds l2_b (another model). The first also holds an earlier, correct
-- attempt of l1_c that the later failed one supersedes, and an unfinished episode.
local A, B = dir .. "/a.sqlite", dir .. "/b.sqlite"
do
  local db = assert(store.open(A))
  local run = db:begin_run { name = "sweep" }
  write_episode(db, run, { "l1_c", 1, "reduction", "correct", 10.0, 1, true, 1, 1, 0, 0, { correct = 1 }, 0.99 })
  for _, e in ipairs(EPS) do
    if e[1] ~= "l2_b" then write_episode(db, run, e) end
  end
  write_episode(db, run, { "l9_zombie", 1, "elementwise" }, { unfinished = true })
  db:finish_run(run)
  db:close()
  local db2 = assert(store.open(B))
  local run2 = db2:begin_run { name = "sweep2" }
  write_episode(db2, run2, EPS[5], { model = "m2" })
  db2:close()
end

local function group(list, key)
  for _, g in ipairs(list) do if g.key == key or g.group == key then return g end end
end

local function fast(m, p)
  for _, f in ipairs(m.fast_p) do if f.p == p then return f.value end end
end

local R
t.test("load keeps the final episode per (task, strategy, model, repeat)", function()
  local eps, info = assert(report.load { A, B })
  t.eq(#eps, 8)
  t.eq(info.superseded, 1)
  t.eq(info.unfinished, 1)
  t.eq(info.runs, 2)
  t.eq(#info.files, 2)
  for _, ep in ipairs(eps) do
    if ep.task == "l1_c" then t.eq(ep.status, "failed", "the later attempt counts") end
  end
  R = report.build(eps, info, { by = { "level", "category" } })
end)

t.test("overall metrics match hand-computed values", function()
  local m = R.all
  t.eq(m.n, 8)
  t.eq(m.correct, 5)
  t.near(m.correctness, 5 / 8, 1e-12)
  t.eq(m.status.correct, 5)
  t.eq(m.status.failed, 2)
  t.eq(m.status.error, 1)
  -- fast_p over all 8 episodes; speedups of the correct ones: 0.8 1.2 1.6 2.5 4.0
  t.near(fast(m, 0), 5 / 8, 1e-12, "fast_0")
  t.near(fast(m, 0.5), 5 / 8, 1e-12, "fast_0.5")
  t.near(fast(m, 1), 4 / 8, 1e-12, "fast_1")
  t.near(fast(m, 1.5), 3 / 8, 1e-12, "fast_1.5")
  t.near(fast(m, 2), 2 / 8, 1e-12, "fast_2")
  t.eq(m.speedup.n, 5)
  t.near(m.speedup.geomean, (0.8 * 1.2 * 1.6 * 2.5 * 4.0) ^ (1 / 5), 1e-12, "geomean")
  t.near(m.speedup.median, 1.6, 1e-12, "median")
  t.near(m.speedup.p10, 0.8 + 0.4 * (1.2 - 0.8), 1e-12, "p10")   -- rank 1.4
  t.near(m.speedup.p90, 2.5 + 0.6 * (4.0 - 2.5), 1e-12, "p90")   -- rank 4.6
  t.near(m.speedup_baseline.geomean, (0.8 * 1.2 * 1.6 * 2.5 * 4.0) ^ (1 / 5) / 2, 1e-12)
  -- compile_ok_first known for 7 (the errored episode evaluated nothing), true for 4
  t.eq(m.compile_first.n, 7)
  t.eq(m.compile_first.ok, 4)
  t.near(m.compile_first.rate, 4 / 7, 1e-12)
  t.near(m.rounds.mean, (1 + 3 + 2 + 1 + 4) / 5, 1e-12, "rounds")
  t.eq(m.tokens.total, 26400)
  t.near(m.tokens.per_solved, 26400 / 5, 1e-9)
  t.near(m.dollars.per_solved, 0.22 / 5, 1e-12)
  t.near(m.gpu_seconds.per_solved, 32 / 5, 1e-12)
  t.eq(m.failure_modes.mismatch, 8)
  t.eq(m.failure_modes.compile_error, 7)
  t.eq(m.failure_modes.correct, 5)
  t.near(m.roofline.mean, (0.8 + 0.4 + 0.5 + 0.9 + 0.3) / 5, 1e-12)
  t.near(m.roofline.median, 0.5, 1e-12)
end)

t.test("per-level and per-category groups", function()
  t.eq(R.by[1].name, "level")
  t.eq(R.by[2].name, "category")
  local keys = {}
  for i, g in ipairs(R.by[1].groups) do keys[i] = g.key end
  t.eq(table.concat(keys, ","), "1,2,3")
  local l1, l2, l3 = group(R.by[1].groups, "1").metrics, group(R.by[1].groups, "2").metrics, group(R.by[1].groups, "3").metrics
  t.eq(l1.n, 3); t.eq(l1.correct, 2)
  t.near(fast(l1, 1), 1 / 3, 1e-12)
  t.near(l1.speedup.geomean, math.sqrt(2.5 * 0.8), 1e-12)
  t.near(l1.compile_first.rate, 2 / 3, 1e-12)
  t.eq(l2.correct, 2)
  t.near(fast(l2, 2), 1 / 2, 1e-12)
  t.near(l2.speedup.median, (1.2 + 4.0) / 2, 1e-12)
  t.near(l2.tokens.per_solved, 3600 / 2, 1e-12)
  t.eq(l3.correct, 1)
  t.near(l3.correctness, 1 / 3, 1e-12)
  t.near(l3.rounds.mean, 4, 1e-12)
  t.near(l3.tokens.per_solved, 12000, 1e-9)
  local red = group(R.by[2].groups, "reduction").metrics
  t.eq(red.n, 2); t.eq(red.correct, 0)
  t.eq(red.speedup.geomean, nil, "no correct episode: no geomean")
  t.eq(red.tokens.per_solved, nil, "nothing solved: no cost per solved task")
  t.eq(fast(red, 1), 0)
  local att = group(R.by[2].groups, "attention").metrics
  t.eq(att.failure_modes.compile_error, 6)
  -- grouping by model: the second file's model
  local r2 = report.build(assert(report.load { A, B }), nil, { by = { "model", "strategy" } })
  t.eq(#r2.by[1].groups, 2)
  t.eq(group(r2.by[1].groups, "m2").metrics.n, 1)
  t.eq(group(r2.by[2].groups, "repair").metrics.n, 8)
  t.raises(function() report.build({}, nil, { by = { "colour" } }) end, "cannot group by 'colour'")
end)

t.test("quantiles interpolate between ranks", function()
  t.eq(report.quantile({}, 0.5), nil)
  t.eq(report.quantile({ 7 }, 0.9), 7)
  t.near(report.quantile({ 1, 2, 3, 4 }, 0.5), 2.5, 1e-12)
  t.near(report.quantile({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 }, 0.1), 2, 1e-12)
end)

t.test("kmrun report --json parses and matches", function()
  local out, rc = sh(KMRUN .. " report " .. A .. " " .. B .. " --json --by level,category 2>/dev/null")
  t.eq(rc, 0, out)
  local o = assert(json.decode(out))
  t.eq(o.episodes, 8)
  t.eq(o.left_out.superseded, 1)
  t.eq(o.left_out.unfinished, 1)
  t.eq(o.all.correct, 5)
  t.near(o.all.fast_p["1"], 0.5, 1e-12)
  t.near(o.all.fast_p["1.5"], 0.375, 1e-12)
  t.near(o.all.speedup.geomean, R.all.speedup.geomean, 1e-12)
  t.near(o.all.speedup.p90, 3.4, 1e-12)
  t.near(o.all.rounds.mean, 2.2, 1e-12)
  t.near(o.all.compile_first.rate, 4 / 7, 1e-12)
  t.near(o.all.tokens.per_solved, 5280, 1e-9)
  t.eq(o.all.failure_modes.mismatch, 8)
  t.eq(#o.by.level, 3)
  t.eq(o.by.level[3].group, "3")
  t.near(o.by.level[3].correctness, 1 / 3, 1e-12)
  local red = group(o.by.category, "reduction")
  t.eq(red.speedup.geomean, json.null, "undefined is null")
  t.eq(red.roofline.mean, json.null)
  t.eq(red.dollars.per_solved, json.null)
  t.ok(not out:find("nan", 1, true) and not out:find("inf", 1, true), "NaN-free")
  -- --by picks the grouping
  local out2 = sh(KMRUN .. " report " .. A .. " --json --by strategy,model 2>/dev/null")
  local o2 = assert(json.decode(out2))
  t.ok(o2.by.strategy and o2.by.model and not o2.by.level, out2)
end)

t.test("the terminal table has a row per group and an all row, aligned", function()
  -- COLUMNS wide: each table in one piece (the 120-column default is tested below)
  local out, rc = sh("COLUMNS=1000 " .. KMRUN .. " report " .. A .. " " .. B .. " --by level --by category")
  t.eq(rc, 0, out)
  t.ok(out:find("8 episode(s) from 2 file(s)", 1, true), out)
  t.ok(out:find("left out: 1 earlier attempt", 1, true), out)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local head
  for i, l in ipairs(lines) do if l:match("^level ") then head = i break end end
  t.ok(head, out)
  t.ok(lines[head + 2]:match("^1%s+3%s+2 %(66%.7%%%)"), lines[head + 2])
  t.ok(lines[head + 3]:match("^2%s+2%s+2 %(100%.0%%%)"), lines[head + 3])
  t.ok(lines[head + 4]:match("^3%s+3%s+1 %(33%.3%%%)"), lines[head + 4])
  t.ok(lines[head + 5]:match("^all%s+8%s+5 %(62%.5%%%)%s+62%.5%%%s+50%.0%%%s+37%.5%%%s+25%.0%%%s+1%.73x%s+1%.60x%s+0%.96x%s+3%.40x%s+57%.1%%%s+2%.20%s+%-%s+5%.3k"), -- reasoning: "-" (none recorded)
    lines[head + 5])
  for k = head, head + 5 do t.eq(#lines[k], #lines[head], "aligned line " .. k) end
  t.ok(out:find("\nattention ", 1, true) and out:find("\nreduction ", 1, true), out)
  t.ok(out:find("mismatch 8, compile_error 7, correct 5", 1, true), out)
end)

local function check_html(html)
  local rest = html:gsub('xmlns="http://www%.w3%.org/2000/svg"', "")
  t.ok(not rest:find("http://", 1, true) and not rest:find("https://", 1, true), "no external references")
  t.ok(not html:find("<link", 1, true) and not html:find("src=", 1, true) and not html:find("@import", 1, true)
    and not html:find("url(", 1, true), "no external assets")
  local n = 0
  for tag in html:gmatch("<svg[^>]*>") do
    n = n + 1
    t.ok(tag:find(' width="%d+"') and tag:find(' height="%d+"'), tag)
  end
  t.eq(n, 6, "six charts")
  t.ok(html:find("data-svg-sizes", 1, true), "the size script")
end

t.test("--html writes a self-contained page with six SVG charts", function()
  local page = dir .. "/r.html"
  local out, rc = sh(KMRUN .. " report " .. A .. " " .. B .. " --html " .. page)
  t.eq(rc, 0, out)
  t.ok(out:find("wrote " .. page, 1, true), out)
  local html = slurp(page)
  check_html(html)
  for _, id in ipairs { "chart-fastp", "chart-speedup", "chart-levels", "chart-rounds", "chart-cost", "chart-heatmap" } do
    t.ok(html:find('id="' .. id .. '"', 1, true), id)
  end
  t.ok(html:find("fast_p by threshold", 1, true) and html:find("Speedup of correct kernels", 1, true)
    and html:find("Correctness by level", 1, true) and html:find("Rounds to a correct kernel", 1, true)
    and html:find("Cost against speedup", 1, true) and html:find("Speedup by task", 1, true), "titles")
  t.ok(html:find("dollars per episode", 1, true), "cost axis in dollars")
  t.ok(not html:find(">no data<", 1, true), "every chart has data")
  local cost = html:match('<svg[^>]*id="chart%-cost".-</svg>')
  local _, circles = cost:gsub("<circle cx", "")
  t.eq(circles, 5, "a point per correct episode")
  -- two series (repair / m1, repair / m2): a curve each, in every legend
  local fastp = html:match('<svg[^>]*id="chart%-fastp".-</svg>')
  local _, curves = fastp:gsub("<polyline", "")
  t.eq(curves, 2, "a fast_p curve per strategy and model")
  t.ok(fastp:find(">m1<", 1, true) and fastp:find(">m2<", 1, true), "the legend names the models")
  t.ok(html:find("<td>reduction</td>", 1, true), "the category table")
  t.ok(html:find("<h2>Strategy x model", 1, true) and html:find("<h2>pass@k over repeats</h2>", 1, true))
  -- a row per reported episode in the episodes table
  local episodes = html:match('<table class="episodes">(.-)</table>')
  t.ok(episodes, "the episodes table")
  local _, n = episodes:gsub("<tr><td", "")
  local r = report.build(report.load { A, B })
  t.eq(n, r.episodes)
end)

-- a store whose episodes all failed, offline (no tokens, no dollars)
local F = dir .. "/failed.sqlite"
do
  local db = assert(store.open(F))
  local run = db:begin_run { name = "offline" }
  write_episode(db, run, { "l1_x", 1, "elementwise", "compile_error", nil, nil, false, 0, 0, 0, 0, { compile_error = 3 }, nil })
  write_episode(db, run, { "l2_x", 2, "gemm", "mismatch", nil, nil, true, 0, 0, 0, 1.5, { mismatch = 2 }, nil })
  db:close()
end

t.test("no correct episode and no tokens: no division by zero, charts say no data", function()
  local eps, info = assert(report.load(F))
  local r = report.build(eps, info)
  t.eq(r.all.correctness, 0)
  t.eq(fast(r.all, 1), 0)
  t.eq(r.all.speedup.geomean, nil)
  t.eq(r.all.rounds.mean, nil)
  t.eq(r.all.tokens.per_solved, nil)
  t.eq(r.all.gpu_seconds.per_solved, nil)
  local o = assert(json.decode(report.json(r)))
  t.eq(o.all.speedup.median, json.null)
  t.eq(o.all.tokens.per_solved, json.null)
  local text = report.text(r)
  t.ok(text:find("\nall ", 1, true), text)
  local html = report.html(r)
  check_html(html)
  local _, nd = html:gsub(">no data<", "")
  t.eq(nd, 3, "speedup, rounds and cost charts are empty; correctness by level is not")
  t.ok(not html:find("nan", 1, true) and not html:find("inf\"", 1, true), "no NaN in coordinates")
end)

t.test("an empty store: a clear message and exit status 1", function()
  local E = dir .. "/empty.sqlite"
  local db = assert(store.open(E))
  local run = db:begin_run { name = "nothing yet" }
  write_episode(db, run, { "l1_a", 1, "elementwise" }, { unfinished = true })
  db:close()
  local out, rc = sh(KMRUN .. " report " .. E)
  t.eq(rc, 1, out)
  t.ok(out:find("no finished episodes in " .. E, 1, true), out)
  t.ok(out:find("1 still running or killed", 1, true), out)
  t.ok(not out:find("traceback", 1, true), out)
  local eps = assert(report.load(E))
  t.eq(#eps, 0)
  local r = report.build(eps, {})
  check_html(report.html(r))
  t.ok(report.text(r):find("0 episode", 1, true))
end)

t.test("a missing file or a bad option: exit status 2 and a clear message", function()
  local out, rc = sh(KMRUN .. " report " .. dir .. "/nope.sqlite")
  t.eq(rc, 2, out)
  t.ok(out:find("nope.sqlite: no such file", 1, true), out)
  t.ok(not out:find("traceback", 1, true), out)
  out, rc = sh(KMRUN .. " report " .. A .. " " .. dir .. "/nope.sqlite")
  t.eq(rc, 2, out)
  out, rc = sh(KMRUN .. " report")
  t.eq(rc, 2, out)
  t.ok(out:find("see kmrun report --help", 1, true), out)
  out, rc = sh(KMRUN .. " report " .. A .. " --by colour")
  t.eq(rc, 2, out)
  t.ok(out:find("cannot group by 'colour'", 1, true), out)
  out, rc = sh(KMRUN .. " report " .. A .. " --html")
  t.eq(rc, 2, out)
  local junk = dir .. "/junk.sqlite"
  local f = assert(io.open(junk, "w"))
  f:write(("not a database\n"):rep(100))
  f:close()
  out, rc = sh(KMRUN .. " report " .. junk)
  t.eq(rc, 2, out)
  t.ok(out:find("junk.sqlite", 1, true), out)
end)

-- A sweep of 2 strategies x 2 models x 2 tasks x 4 repeats. repair/m1 solves t1 in 3 of 4
-- repeats (speedups 1.5, 3, 0.5) and t2 in 1 of 4 (speedup 2); the other series solve
-- everything at 1.2x, except tune/m2, which solves nothing.
local S = dir .. "/sweep.sqlite"
do
  local db = assert(store.open(S))
  local run = db:begin_run { name = "sweep" }
  local plan = {
    ["repair|m1|t1"] = { 1.5, 3.0, 0.5, false }, ["repair|m1|t2"] = { false, 2.0, false, false },
  }
  for _, st in ipairs { "repair", "tune" } do
    for _, m in ipairs { "m1", "m2" } do
      for _, tk in ipairs { "t1", "t2" } do
        for rp = 1, 4 do
          local sp = plan[st .. "|" .. m .. "|" .. tk]
          local x
          if sp then x = sp[rp] elseif st == "tune" and m == "m2" then x = false else x = 1.2 end
          write_episode(db, run, { "l1_" .. tk, 1, "elementwise", x and "correct" or "mismatch", x or nil, x and 1 or nil, true,
            0, 0, 0, 1, x and { correct = 1 } or { mismatch = 1 } }, { strategy = st, model = m, rep = rp })
        end
      end
    end
  end
  db:close()
end

t.test("by default, strategies and models are kept apart in every table", function()
  local r = report.build(assert(report.load(S)))
  t.eq(r.by[1].name, "strategy+model")
  t.eq(#r.by[1].groups, 4)
  t.eq(table.concat(r.by[1].groups[1].values, ","), "repair,m1")
  local g = group(r.by[1].groups, "repair / m1").metrics
  t.eq(g.n, 8); t.eq(g.correct, 4)
  t.near(fast(g, 1), 3 / 8, 1e-12)
  t.eq(r.by[2].name, "level+strategy+model")
  t.eq(#r.by[2].groups, 4, "one level x 4 series")
  t.eq(#r.series, 4)
  t.eq(r.series[1].label, "repair / m1")
  local text = report.text(r)
  t.ok(text:find("strategy  model", 1, true), text)
  t.ok(text:find("strategy x model", 1, true) and text:find("pass@k over repeats", 1, true), text)
  local line = text:match("\nrepair%s+m1[^\n]*")
  t.ok(line and line:find("4 (50.0%)", 1, true), line)
  -- the strategy x model table: a row per strategy, a column per model
  t.ok(text:match("\ntune%s+100%.0%% 100%.0%% 1%.20x%s+0%.0%% 0%.0%% %-"), text)
end)

t.test("pass@k over repeats: the unbiased estimate, with a bootstrap interval over tasks", function()
  t.near(report.pass_at(4, 3, 1), 0.75, 1e-12)
  t.near(report.pass_at(4, 1, 2), 0.5, 1e-12)
  t.eq(report.pass_at(4, 0, 4), 0)
  t.eq(report.pass_at(4, 2, 3), 1)
  t.eq(report.pass_at(2, 1, 4), nil, "k above the repeats: undefined")
  local r = report.build(assert(report.load(S)))
  local e = r.pass_at_k[1]
  t.eq(e.strategy, "repair"); t.eq(e.model, "m1")
  t.eq(e.tasks, 2); t.eq(e.repeats_min, 4); t.eq(e.repeats_max, 4)
  t.eq(#e.k, 3, "k = 1, 2, 4")
  t.near(e.k[1].value, (0.75 + 0.25) / 2, 1e-12, "pass@1")
  t.near(e.k[2].value, (1 + 0.5) / 2, 1e-12, "pass@2")
  t.near(e.k[3].value, 1, 1e-12, "pass@4")
  -- two tasks: the resampled means are 0.25, 0.5 or 0.75
  t.ok(e.k[1].lo >= 0.25 - 1e-12 and e.k[1].lo < 0.5 and e.k[1].hi > 0.5 and e.k[1].hi <= 0.75 + 1e-12,
    e.k[1].lo .. " " .. e.k[1].hi)
  local again = report.build(assert(report.load(S)))
  t.eq(again.pass_at_k[1].k[1].lo, e.k[1].lo, "the same interval every run")
  t.eq(r.pass_at_k[4].k[1].value, 0, "tune / m2 solves nothing")
end)

t.test("the fast_p curve and the per-task map, per series", function()
  local r = report.build(assert(report.load(S)))
  local c = r.fast_p_curve[1]
  local at = {}
  for _, pt in ipairs(c.points) do at[pt.p] = pt.value end
  t.near(at[0], 4 / 8, 1e-12, "p = 0: correct")
  t.near(at[1], 3 / 8, 1e-12)
  t.near(at[2], 1 / 8, 1e-12, "only the 3x is faster than 2x")
  t.near(at[4], 0, 1e-12)
  t.near(at[0.25], 4 / 8, 1e-12)
  t.eq(c.points[1].p, 0)
  t.eq(c.points[#c.points].p, 4, "up to 4x")
  t.eq(c.baseline, "cuda_reference", "an old store: speedups over the CUDA reference")
  local m = r.heatmap
  t.eq(table.concat(m.tasks, ","), "l1_t1,l1_t2")
  local cell = m.cells[1][1]
  t.eq(cell.n, 4); t.eq(cell.correct, 3)
  t.near(cell.speedup, 1.5, 1e-12, "median of 1.5, 3, 0.5")
  t.eq(m.cells[1][4].status, "mismatch")
  t.eq(m.cells[1][4].correct, 0)
  local html = report.html(r)
  local map = html:match('<svg[^>]*id="chart%-heatmap".-</svg>')
  local _, cells = map:gsub("<rect x=\"[%d%.]+\" y=\"[%d%.]+\" width=\"[%d%.]+\" height=\"15\"", "")
  t.eq(cells, 2 * 4, "a cell per task and series")
  t.ok(map:find("1.50x", 1, true), "the median speedup in the cell")
  local by_status = report.html(r, { heatmap = "status" }):match('<svg[^>]*id="chart%-heatmap".-</svg>')
  t.ok(by_status:find("Final status by task", 1, true) and by_status:find(">mismatch<", 1, true), "status legend")
end)

t.test("kmrun report --csv writes every table; --fast-p sets the thresholds; --json has them all", function()
  local csvdir = dir .. "/csv"
  local out, rc = sh(KMRUN .. " report " .. S .. " --csv " .. csvdir .. " --fast-p 1,3 --heatmap status --html " .. dir .. "/s.html")
  t.eq(rc, 0, out)
  t.ok(out:find("fast_1", 1, true) and out:find("fast_3", 1, true) and not out:find("fast_1.5", 1, true), out)
  t.ok(out:find("CSV file(s) in " .. csvdir, 1, true), out)
  for _, f in ipairs { "by_strategy_model.csv", "by_level_strategy_model.csv", "by_category_strategy_model.csv",
      "strategy_model.csv", "pass_at_k.csv", "fast_p_curve.csv", "task_map.csv", "episodes.csv" } do
    local text = slurp(csvdir .. "/" .. f)
    local lines = {}
    for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
    t.ok(#lines >= 2, f)
    local _, ncols = lines[1]:gsub(",", "")
    for k, l in ipairs(lines) do
      local _, nc = l:gsub(",", "")
      t.eq(nc, ncols, f .. " line " .. k .. " has the header's columns")
    end
  end
  local pk = slurp(csvdir .. "/pass_at_k.csv")
  t.ok(pk:find("^strategy,model,k,tasks,pass_at_k,ci_low,ci_high\n"), pk)
  t.ok(pk:find("\nrepair,m1,1,2,0.5,", 1, true), pk)
  t.ok(slurp(csvdir .. "/by_strategy_model.csv"):find("fast_3", 1, true), "the asked thresholds")
  local _, eps = slurp(csvdir .. "/episodes.csv"):gsub("\n", "")
  t.eq(eps, 1 + 32, "a row per episode")
  out, rc = sh(KMRUN .. " report " .. S .. " --json 2>/dev/null")
  local o = assert(json.decode(out))
  t.eq(#o.series, 4)
  t.eq(o.series[1].strategy, "repair")
  t.eq(#o.pass_at_k, 4)
  t.near(o.pass_at_k[1].k[2].value, 0.75, 1e-12)
  t.eq(#o.fast_p_curve[1].points, #report.CURVE_P)
  t.eq(#o.task_map, 2 * 4)
  t.eq(o.by["strategy+model"][1].keys.model, "m1")
  -- bad values name themselves
  out, rc = sh(KMRUN .. " report " .. S .. " --fast-p x")
  t.eq(rc, 2); t.ok(out:find("--fast-p: 'x'", 1, true), out)
  out, rc = sh(KMRUN .. " report " .. S .. " --heatmap colour")
  t.eq(rc, 2); t.ok(out:find("--heatmap: 'colour' wants one of speedup or status", 1, true), out)
  out, rc = sh(KMRUN .. " report " .. S .. " --by level+colour")
  t.eq(rc, 2); t.ok(out:find("cannot group by 'colour'", 1, true), out)
end)

-- Speedups against several baselines (issue 8): summaries written by km.run.runner.summary from
-- verdicts that carry speedup_over, speedup_eager, speedup_compile, speedup_cuda_reference and
-- compile_mode. One series (agent / m1), levels 1 and 2:
--   task  level status        over            speedup  eager  compile  cuda  compile mode
--   k1_a  1     correct       pytorch_eager   2.0      2.0    1.2      10    max-autotune-no-cudagraphs
--   k1_b  1     correct       pytorch_eager   0.9      0.9    0.5      3     max-autotune-no-cudagraphs
--   k1_c  1     mismatch
--   k2_a  2     correct       pytorch_eager   1.6      1.6    1.1      -     default
--   k2_b  2     correct       pytorch_eager   1.4      1.4    -        -     (compile not measured)
--   k2_c  2     correct       cuda_reference  3.0      -      -        3.0   (a task with no PyTorch reference)
--   k2_d  2     compile_error
local runner = require "km.run.runner"
local K = dir .. "/baselines.sqlite"
local KEPS = {
  { "k1_a", 1, "correct", "pytorch_eager", 2.0, 2.0, 1.2, 10, "max-autotune-no-cudagraphs" },
  { "k1_b", 1, "correct", "pytorch_eager", 0.9, 0.9, 0.5, 3, "max-autotune-no-cudagraphs" },
  { "k1_c", 1, "mismatch" },
  { "k2_a", 2, "correct", "pytorch_eager", 1.6, 1.6, 1.1, nil, "default" },
  { "k2_b", 2, "correct", "pytorch_eager", 1.4, 1.4 },
  { "k2_c", 2, "correct", "cuda_reference", 3.0, nil, nil, 3.0 },
  { "k2_d", 2, "compile_error" },
}
do
  local db = assert(store.open(K))
  local run = db:begin_run { name = "baselines" }
  for _, e in ipairs(KEPS) do
    local ep = assert(db:begin_episode(run, { task = e[1], strategy = "agent", model = "m1" }))
    local v = { status = e[3], speedup_over = e[4], speedup = e[5], speedup_eager = e[6], speedup_compile = e[7],
      speedup_cuda_reference = e[8], compile_mode = e[9] }
    local ctx = { args = {}, stats = { evals = 1, model_calls = 1, failure_modes = { [e[3]] = 1 }, gpu_seconds = 1 } }
    assert(db:finish_episode(ep, e[3] == "correct" and "correct" or "failed", {
      final = { candidate = { name = e[1] }, verdict = v },
      summary = runner.summary({ level = e[2], category = "x" }, ctx, v, 1) }))
  end
  db:close()
end

local function against(m, key, p)
  for _, f in ipairs(m.against[key].fast_p) do if f.p == p then return f.value end end
end

local function curve_at(curves, want)
  for _, c in ipairs(curves) do
    local hit = true
    for k, v in pairs(want) do if c[k] ~= v then hit = false end end
    if hit then
      local at = {}
      for _, pt in ipairs(c.points) do at[pt.p] = pt.value end
      return at
    end
  end
end

t.test("km.run.runner's summary carries what the speedup is over and the speedup over each baseline", function()
  local ctx = { args = {}, stats = { evals = 1, failure_modes = {} } }
  local s = runner.summary({}, ctx, { status = "correct", speedup = 2, speedup_over = "pytorch_eager", speedup_eager = 2,
    speedup_compile = 1.5, speedup_cuda_reference = 9, compile_mode = "default" }, 1)
  t.eq(s.speedup_over, "pytorch_eager"); t.eq(s.speedup_eager, 2); t.eq(s.speedup_compile, 1.5)
  t.eq(s.speedup_cuda_reference, 9); t.eq(s.compile_mode, "default")
  s = runner.summary({}, ctx, { status = "correct", speedup = 2 }, 1)
  t.eq(s.speedup_over, nil); t.eq(s.speedup_eager, nil); t.eq(s.speedup_compile, nil); t.eq(s.compile_mode, nil)
end)

t.test("fast_p against eager, torch.compile and the CUDA reference, per level and overall", function()
  local r = report.build(assert(report.load(K)))
  local m = r.all
  t.eq(m.n, 7); t.eq(m.correct, 5)
  -- eager: timed 2.0 0.9 1.6 1.4; k2_c (CUDA reference only) is correct without an eager time
  t.near(against(m, "eager", 0), 5 / 7, 1e-12, "eager fast_0 = correctness")
  t.near(against(m, "eager", 1), 3 / 7, 1e-12, "eager fast_1")
  t.near(against(m, "eager", 1.5), 2 / 7, 1e-12, "eager fast_1.5")
  t.eq(m.against.eager.timed, 4); t.eq(m.against.eager.untimed, 1)
  t.near(m.against.eager.speedup.geomean, (2.0 * 0.9 * 1.6 * 1.4) ^ (1 / 4), 1e-12)
  -- compile: timed 1.2 0.5 1.1
  t.near(against(m, "compile", 0), 5 / 7, 1e-12, "compile fast_0")
  t.near(against(m, "compile", 1), 2 / 7, 1e-12, "compile fast_1")
  t.eq(against(m, "compile", 1.5), 0, "compile fast_1.5")
  t.eq(m.against.compile.timed, 3); t.eq(m.against.compile.untimed, 2)
  -- the CUDA reference: timed 10, 3 and k2_c's 3.0
  t.near(against(m, "cuda_reference", 1.5), 3 / 7, 1e-12)
  t.eq(m.against.cuda_reference.untimed, 2)
  -- the headline pools 4 speedups over eager and 1 over the CUDA reference, and says so
  t.eq(m.speedup_over.pytorch_eager, 4); t.eq(m.speedup_over.cuda_reference, 1)
  t.ok(r.mixed, "mixed baselines")
  t.eq(m.compile_modes["max-autotune-no-cudagraphs"], 2); t.eq(m.compile_modes.default, 1)
  local keys = {}
  for i, b in ipairs(r.baselines) do keys[i] = b.key end
  t.eq(table.concat(keys, ","), "eager,compile,cuda_reference")
  -- per level x strategy x model
  t.eq(#r.level_series, 2)
  local l1, l2 = r.level_series[1].metrics, r.level_series[2].metrics
  t.eq(r.level_series[1].level, "1")
  t.near(against(l1, "eager", 1), 1 / 3, 1e-12); t.near(against(l1, "compile", 1), 1 / 3, 1e-12)
  t.near(against(l2, "eager", 1), 2 / 4, 1e-12); t.near(against(l2, "eager", 1.5), 1 / 4, 1e-12)
  t.near(against(l2, "compile", 1), 1 / 4, 1e-12)
  -- the curves: a series x baseline, and per level
  t.eq(#r.fast_p_curve, 3)
  local eager = curve_at(r.fast_p_curve, { baseline = "eager" })
  t.near(eager[0], 5 / 7, 1e-12); t.near(eager[1], 3 / 7, 1e-12)
  t.near(eager[2 ^ 0.5], 2 / 7, 1e-12, "1.4 is not faster than 1.414x")
  local compile = curve_at(r.fast_p_curve, { baseline = "compile" })
  t.near(compile[0.5], 2 / 7, 1e-12, "0.5x is not faster than 0.5x")
  t.near(compile[1], 2 / 7, 1e-12)
  t.eq(#r.fast_p_curve_by_level, 2 * 3)
  t.near(curve_at(r.fast_p_curve_by_level, { level = "2", baseline = "eager" })[1], 2 / 4, 1e-12)
  t.near(curve_at(r.fast_p_curve_by_level, { level = "1", baseline = "compile" })[1], 1 / 3, 1e-12)
end)

t.test("the text report names the baselines, never pools them silently, and has a block per baseline", function()
  local out, rc = sh("COLUMNS=1000 " .. KMRUN .. " report " .. K)
  t.eq(rc, 0, out)
  t.ok(out:find("speedup, fast_p and geomean columns against PyTorch eager (4 timed correct episode(s)), " ..
    "the CUDA reference (1)", 1, true), out)
  t.ok(out:find("\nwarning: those columns pool episodes timed against different baselines", 1, true), out)
  t.ok(out:find("torch.compile (3 timed, 2 correct without a time; mode default 1, max-autotune-no-cudagraphs 2)", 1, true), out)
  t.ok(out:match("\nall%s+7%s+5 %(71%.4%%%)%s+eager 4 %+ CUDA ref 1%s"), "the vs column")
  t.ok(out:find("fast_p against each baseline (", 1, true), out)
  t.ok(out:match("\nall%s+eager%s+7%s+5%s+4%s+1%s+57%.1%%%s+42%.9%%%s+28%.6%%%s+0%.0%%%s+1%.42x"), out)
  t.ok(out:match("\nall%s+compile%s+7%s+5%s+3%s+2%s+28%.6%%%s+28%.6%%%s+0%.0%%%s+0%.0%%"), "compile, all")
  t.ok(out:match("\n2%s+agent%s+m1%s+eager%s+4%s+3%s+2%s+1%s+50%.0%%%s+50%.0%%%s+25%.0%%"), "eager, level 2")
  t.ok(out:match("\nall%s+agent%s+m1%s+CUDA ref%s+7%s+5%s+3%s+2%s"), "CUDA reference, the series")
  -- a store of one baseline: no warning, no vs column
  local one = sh("COLUMNS=1000 " .. KMRUN .. " report " .. A)
  t.ok(one:find("columns against the CUDA reference (4 timed correct episode(s))", 1, true), one)
  t.ok(not one:find("warning:", 1, true) and one:match("\nstrategy%s+model%s+n%s+correct%s+fast_0%.5"), one)
end)

t.test("JSON and CSV carry fast_p and its curves per baseline and per level", function()
  local csvdir = dir .. "/kcsv"
  local out, rc = sh(KMRUN .. " report " .. K .. " --json --csv " .. csvdir .. " 2>/dev/null")
  t.eq(rc, 0, out)
  local o = assert(json.decode(out))
  t.near(o.all.against.eager.fast_p["1"], 3 / 7, 1e-12)
  t.near(o.all.against.compile.fast_p["1"], 2 / 7, 1e-12)
  t.eq(o.all.against.compile.fast_p["1.5"], 0)
  t.eq(o.all.against.compile.untimed, 2)
  t.eq(o.all.speedup_over.cuda_reference, 1)
  t.eq(o.all.compile_modes.default, 1)
  t.eq(table.concat(o.baselines, ","), "eager,compile,cuda_reference")
  t.eq(o.mixed_speedups, true)
  t.eq(#o.fast_p_curve, 3)
  t.eq(o.fast_p_curve[2].baseline, "compile")
  t.eq(#o.fast_p_curve_by_level, 6)
  t.eq(o.fast_p_curve_by_level[1].level, "1")
  t.eq(o.by["level+strategy+model"][2].against.eager.timed, 2)
  local curve = slurp(csvdir .. "/fast_p_curve.csv")
  t.ok(curve:find("^strategy,model,baseline,p,fast_p\n"), curve)
  t.ok(curve:find("\nagent,m1,eager,1,0.42857142857142855\n", 1, true), curve)
  t.ok(curve:find("\nagent,m1,compile,0,0.7142857142857143", 1, true), curve)
  local lv = slurp(csvdir .. "/fast_p_curve_by_level.csv")
  t.ok(lv:find("^level,strategy,model,baseline,p,fast_p\n"), lv)
  t.ok(lv:find("\n2,agent,m1,eager,1,0.5\n", 1, true), lv)
  local fb = slurp(csvdir .. "/fast_p_by_baseline.csv")
  t.ok(fb:find("^level,strategy,model,baseline,n,correct,timed,untimed,fast_0.5,fast_1,fast_1.5,fast_2,speedup_geomean,"), fb)
  t.ok(fb:find("\nall,,,compile,7,5,3,2,0.2857142857142857,0.2857142857142857,0,0,", 1, true), fb)
  local eps = slurp(csvdir .. "/episodes.csv")
  t.ok(eps:find("speedup_over,speedup_eager,speedup_compile,speedup_cuda_reference,compile_mode", 1, true), eps)
  t.ok(eps:find("\nk2_c,2,x,agent,m1,,correct,correct,3,cuda_reference,,,3,,", 1, true), eps)
end)

t.test("the fast_p chart draws a line style per baseline", function()
  local html = report.html(report.build(assert(report.load(K))))
  check_html(html)
  local fastp = html:match('<svg[^>]*id="chart%-fastp".-</svg>')
  local _, curves = fastp:gsub("<polyline", "")
  t.eq(curves, 3, "a curve per series and baseline")
  local _, dashed = fastp:gsub('<polyline[^>]*stroke%-dasharray', "")
  t.eq(dashed, 2, "torch.compile and the CUDA reference dashed, eager solid")
  t.ok(fastp:find("against torch.compile", 1, true) and fastp:find("against PyTorch eager", 1, true), "the style key")
  t.ok(html:find("<h2>fast_p against each baseline</h2>", 1, true), "the per-baseline table")
end)

t.test("stores from before speedup_over: speedup is over the CUDA reference unless it says eager", function()
  local r = report.build(assert(report.load { A, B }))
  for _, row in ipairs(r.rows) do
    if row.speedup then
      t.eq(row.speedup_over, "cuda_reference"); t.eq(row.speedup_cuda_reference, row.speedup); t.eq(row.speedup_eager, nil)
    end
  end
  t.eq(#r.baselines, 1); t.eq(r.baselines[1].key, "cuda_reference")
  t.ok(not r.mixed)
  t.near(against(r.all, "cuda_reference", 1), fast(r.all, 1), 1e-12)
  t.eq(r.fast_p_curve[1].baseline, "cuda_reference")
  -- speedup_over = pytorch_eager without speedup_eager (a summary written before it): eager is the speedup;
  -- a summary without the fields: the final verdict's
  local O = dir .. "/old.sqlite"
  local db = assert(store.open(O))
  local run = db:begin_run { name = "old" }
  local ep = assert(db:begin_episode(run, { task = "o1", strategy = "s", model = "m" }))
  assert(db:finish_episode(ep, "correct", { summary = { status = "correct", speedup = 1.3, speedup_over = "pytorch_eager" } }))
  ep = assert(db:begin_episode(run, { task = "o2", strategy = "s", model = "m" }))
  assert(db:finish_episode(ep, "correct", { final = { verdict = { status = "correct", speedup = 0.7, speedup_over = "pytorch_eager",
    speedup_eager = 0.7, speedup_compile = 0.4, compile_mode = "default" } }, summary = { status = "correct" } }))
  db:close()
  local o = report.build(assert(report.load(O)))
  t.eq(o.rows[1].speedup_eager, 1.3); t.eq(o.rows[1].speedup_cuda_reference, nil)
  t.eq(o.rows[2].speedup_compile, 0.4); t.eq(o.rows[2].compile_mode, "default")
  t.near(against(o.all, "eager", 1), 1 / 2, 1e-12)
  t.eq(against(o.all, "compile", 0.1), nil, "0.1 is not a threshold asked for")
  t.eq(o.all.against.compile.untimed, 1)
  t.ok(report.text(o):find("against PyTorch eager (2 timed correct episode(s))", 1, true))
end)

-- A store where metrics are missing: "flop" has no correct episode, no cost and no
-- starter; "good" has both. Every CSV value must sit under its own header: checked
-- against the JSON report of the same group (issue 19: missing values shifted columns).
local G = dir .. "/gaps.sqlite"
do
  local db = assert(store.open(G))
  local run = db:begin_run { name = "gaps" }
  for _, e in ipairs {
    { "g_a", 1, "x", "correct", 2.0, 1, true, 100, 20, 0.5, 2, { correct = 1 }, 0.5 },
    { "g_b", 1, "x", "correct", 0.5, 2, false, 100, 20, 0.25, 2, { mismatch = 1, correct = 1 }, 0.25 },
  } do write_episode(db, run, e, { strategy = "good" }) end
  for _, e in ipairs {
    { "g_a", 1, "x", "mismatch", nil, nil, true, 100, 20, nil, 1, { mismatch = 1 }, nil },
    { "g_b", 1, "x", "compile_error", nil, nil, false, 100, 20, nil, 1, { compile_error = 1 }, nil },
  } do write_episode(db, run, e, { strategy = "flop" }) end
  db:close()
end

-- The value at a CSV column's name in a JSON metrics object: fast_P is fast_p[P]; other
-- names are paths whose parts are joined by "_" (speedup_baseline_geomean ->
-- speedup_baseline.geomean), found by trying each split.
local function json_at(o, name)
  local fp = name:match("^fast_(.+)$")
  if fp then return true, o.fast_p[fp] end
  if o[name] ~= nil and type(o[name]) ~= "table" then return true, o[name] end
  for i = #name - 1, 2, -1 do
    if name:sub(i, i) == "_" and type(o[name:sub(1, i - 1)]) == "table" then
      local found, v = json_at(o[name:sub(1, i - 1)], name:sub(i + 1))
      if found then return true, v end
    end
  end
  return false
end

local function csv_rows(text)
  local rows = {}
  for l in text:gmatch("[^\n]+") do
    local row = {}
    for c in (l .. ","):gmatch("([^,]*),") do row[#row + 1] = c end
    rows[#rows + 1] = row
  end
  return rows
end

t.test("report --csv: a missing value is an empty cell, every value under its own header (checked against --json)", function()
  local csvdir = dir .. "/gapcsv"
  local out, rc = sh(KMRUN .. " report " .. G .. " --csv " .. csvdir .. " --by strategy")
  t.eq(rc, 0, out)
  local js = sh(KMRUN .. " report " .. G .. " --by strategy --json 2>/dev/null")
  local o = assert(json.decode(js))
  local groups = { all = o.all }
  for _, g in ipairs(o.by.strategy) do groups[g.keys.strategy] = g end
  local rows = csv_rows(slurp(csvdir .. "/by_strategy.csv"))
  local head = rows[1]
  t.eq(head[1], "strategy")
  t.eq(#rows, 1 + 3, "good, flop, all")
  local checked = 0
  for k = 2, #rows do
    local row = rows[k]
    t.eq(#row, #head, "line " .. k .. " has the header's columns")
    local g = assert(groups[row[1]], row[1])
    for j = 2, #head do
      local name, cell = head[j], row[j]
      if name == "speedup_over" then
        local want = {}
        for key in pairs(g.speedup_over) do want[#want + 1] = key end
        table.sort(want)
        t.eq(cell, table.concat(want, "+"), row[1] .. " speedup_over")
      else
        local found, want = json_at(g, name)
        t.ok(found, "the JSON report has " .. name)
        if want == nil or want == json.null then
          t.eq(cell, "", row[1] .. " " .. name .. " is missing: an empty cell")
        else
          t.ok(cell ~= "" and math.abs(tonumber(cell) - want) <= 1e-9 * math.max(1, math.abs(want)),
            string.format("%s %s: CSV %q, JSON %s", row[1], name, cell, tostring(want)))
        end
      end
      checked = checked + 1
    end
  end
  t.ok(checked > 40, checked .. " values checked")
  -- the shift that was: flop's speedup_geomean read as its compile rate
  local flop
  for k = 2, #rows do if rows[k][1] == "flop" then flop = rows[k] end end
  for j, name in ipairs(head) do
    if name == "speedup_geomean" then t.eq(flop[j], "") end
    if name == "compile_first_rate" then t.eq(flop[j], "0.5") end
  end
end)

t.test("report tables: the fast_p headers name their baseline, and the legend says how", function()
  local out, rc = sh(KMRUN .. " report " .. K .. " --by strategy 2>/dev/null")
  t.eq(rc, 0, out)
  t.ok(out:find("fast_1(vs)", 1, true), "mixed baselines: the vs column names them: " .. out)
  t.ok(out:find("fast_p(B): share of all episodes correct and faster than p x baseline B", 1, true), out)
  -- a store whose speedups are all over eager
  local E = dir .. "/eager.sqlite"
  local db = assert(store.open(E))
  local run = db:begin_run { name = "eager" }
  for i, sp in ipairs { 2.0, 0.5 } do
    local ep = assert(db:begin_episode(run, { task = "e" .. i, strategy = "agent", model = "m1" }))
    local v = { status = "correct", speedup_over = "pytorch_eager", speedup = sp, speedup_eager = sp }
    local ctx = { args = {}, stats = { evals = 1, model_calls = 1, failure_modes = { correct = 1 }, gpu_seconds = 1 } }
    assert(db:finish_episode(ep, "correct", { final = { candidate = { name = "e" }, verdict = v },
      summary = runner.summary({ level = 1, category = "x" }, ctx, v, 1) }))
  end
  db:close()
  out, rc = sh(KMRUN .. " report " .. E .. " --by strategy 2>/dev/null")
  t.eq(rc, 0, out)
  t.ok(out:find("fast_1(eager)", 1, true) and out:find("fast_0.5(eager)", 1, true), out)
  t.ok(out:find("strategy x model (correct, fast_1, geomean speedup over eager)", 1, true), out)
  local first = out:match("^(.-)\nstrategy x model")
  t.ok(first and not first:find("fast_1 ", 1, true), "no unlabelled fast_1 column: " .. out)
  local csvdir = dir .. "/eagercsv"
  sh(KMRUN .. " report " .. E .. " --by strategy --csv " .. csvdir)
  local rows = csv_rows(slurp(csvdir .. "/by_strategy.csv"))
  t.eq(rows[1][5], "speedup_over")
  t.eq(rows[2][5], "pytorch_eager")
end)

-- GPU time (issue 17): verdict steps as km.run.runner logs them (kind "verdict", the verdict as
-- the payload). Strategy "new": verdicts that carry stage_seconds and kernel_seconds, a
-- no-candidate verdict (not judged) and an earlier attempt that a later one supersedes;
-- strategy "old": judged verdicts from before those fields (eval_seconds only).
local GT, GO = dir .. "/gputime.sqlite", dir .. "/gputime_old.sqlite"
local function gpu_episode(db, run, task, strategy, verdicts)
  local ep = assert(db:begin_episode(run, { task = task, strategy = strategy, model = "m1", rep = 1 }))
  for _, v in ipairs(verdicts) do assert(db:append(ep, "verdict", v, { duration_ms = 5 })) end
  local last = verdicts[#verdicts]
  assert(db:finish_episode(ep, last.status == "correct" and "correct" or "failed", { final = { verdict = last },
    summary = { status = last.status, speedup = last.speedup, level = 1, evals = #verdicts } }))
end
do
  local db = assert(store.open(GT))
  local run = db:begin_run { name = "gpu time" }
  -- the earlier attempt of new/t2: left out, with its 1000 s
  gpu_episode(db, run, "t2", "new", { { status = "mismatch", eval_seconds = 1000, stage_seconds = { task = 1000 } } })
  gpu_episode(db, run, "t1", "new", {
    { status = "no_code", feedback = "no code block" },
    { status = "mismatch", eval_seconds = 2.1, stage_seconds = { task = 1.0, prepare = 0.5, verify = 0.5 } },
    { status = "correct", speedup = 2, eval_seconds = 4.1, kernel_seconds = 1.5, timing = { candidate = { n = 24 } },
      stage_seconds = { task = 0.1, prepare = 0.2, baselines = 0.3, verify = 0.4, measure = 3.0 } },
  })
  gpu_episode(db, run, "t2", "new", {
    { status = "correct", speedup = 1.5, eval_seconds = 4.1, kernel_seconds = 0.5, timing = { candidate = { n = 20 } },
      stage_seconds = { task = 0.2, prepare = 0.3, baselines = 0.1, verify = 0.4, measure = 2.0, energy = 1.0 } },
  })
  gpu_episode(db, run, "t1", "old", { { status = "mismatch", eval_seconds = 3 }, { status = "correct", speedup = 1.2, eval_seconds = 5 } })
  db:finish_run(run)
  db:close()
  db = assert(store.open(GO))
  run = db:begin_run { name = "before stage_seconds" }
  gpu_episode(db, run, "t1", "old", { { status = "mismatch", eval_seconds = 3 }, { status = "correct", speedup = 1.2, eval_seconds = 5 } })
  gpu_episode(db, run, "t2", "old", { { status = "correct", speedup = 0.9, eval_seconds = 4 } })
  db:finish_run(run)
  db:close()
end

t.test("GPU time: stage seconds, kernel seconds, harness overhead and evaluations per GPU-hour per group", function()
  local eps, info = assert(report.load { GT })
  t.eq(info.superseded, 1)
  local r = report.build(eps, info, { by = { "strategy" } })
  local new, old = group(r.by[1].groups, "new").metrics.gpu_time, group(r.by[1].groups, "old").metrics.gpu_time
  t.eq(new.judged, 3, "the no-candidate verdict was not judged; the superseded attempt is not counted")
  t.eq(new.recorded, 3)
  t.eq(new.timed, 2)
  local want = { task = 1.3, prepare = 1.0, baselines = 0.4, verify = 1.3, measure = 5.0, energy = 1.0 }
  for k, x in pairs(want) do t.near(new.stages[k], x, 1e-9, k) end
  t.near(new.seconds, 10.0, 1e-9)
  t.near(new.kernel, 2.0, 1e-9)
  t.eq(new.samples, 44, "the timed samples behind the kernel seconds (bench/headline.lua reads them)")
  t.near(new.measure_over_kernel, 2.5, 1e-9)
  t.near(new.stages_over_kernel, 5.0, 1e-9)
  t.near(new.evals_per_gpu_hour, 3 / 10 * 3600, 1e-6)
  t.eq(report.gpu_time_state(new), "recorded")
  -- the old strategy's verdicts predate the fields: not recorded, never zero
  t.eq(old.judged, 2)
  t.eq(old.recorded, 0)
  t.eq(report.gpu_time_state(old), "not recorded")
  t.eq(old.stages, nil); t.eq(old.seconds, nil); t.eq(old.kernel, nil)
  t.eq(old.evals_per_gpu_hour, nil); t.eq(old.measure_over_kernel, nil)
  -- overall: the recorded sums, said to cover 3 of 5 judged evaluations
  local all = r.all.gpu_time
  t.eq(report.gpu_time_state(all), "partly recorded")
  t.eq(all.judged, 5); t.eq(all.recorded, 3)
  t.near(all.seconds, 10.0, 1e-9)
  t.near(all.evals_per_gpu_hour, 1080, 1e-6)
end)

t.test("GPU time in the text, JSON, CSV and HTML reports; an older store says not recorded", function()
  local out, rc = sh("COLUMNS=1000 " .. KMRUN .. " report " .. GT .. " --by strategy 2>/dev/null")
  t.eq(rc, 0, out)
  t.ok(out:find("GPU time: 10.0 s in the judge's stages over 3 evaluation(s) (1080 per GPU-hour); the candidates' " ..
    "own timed kernels 2.00 s over 2: harness overhead measure/kernel 2.50x, all stages/kernel 5.00x " ..
    "(recorded for 3 of 5 judged evaluation(s))", 1, true), out)
  local sec = out:match("\nGPU time by stage %b():\n(.-)\n\n")
  t.ok(sec, out)
  local lines = {}
  for l in sec:gmatch("[^\n]+") do lines[#lines + 1] = l end
  t.eq(#lines, 5, "header, rule, new, old, all: " .. sec)
  t.ok(lines[1]:match("^strategy%s+model%s+judged%s+recorded%s+task%s+prepare%s+baselines%s+verify%s+measure%s+energy%s+" ..
    "stages%s+kernel%s+measure/kernel%s+stages/kernel%s+evals/GPU%-h$"), lines[1])
  t.ok(lines[3]:match("^new%s+m1%s+3%s+3%s+1%.30%s+1%.00%s+0%.40%s+1%.30%s+5%.00%s+1%.00%s+10%.0%s+2%.00%s+2%.50x%s+5%.00x%s+1080$"), lines[3])
  t.ok(lines[4]:match("^old%s+m1%s+2%s+0 %(not recorded%)%s+%-%s+%-%s+%-%s+%-%s+%-%s+%-%s+%-%s+%-%s+%-%s+%-%s+%-$"), lines[4])
  t.ok(lines[5]:match("^all%s+5%s+3%s+1%.30"), lines[5])
  -- the main table: evals/GPU-h and measure/kernel per group, "-" where not recorded
  t.ok(out:find("evals/GPU-h  measure/kernel\n", 1, true), out)
  t.ok(out:match("\nnew%s[^\n]-%s1080%s+2%.50x\n"), out)
  t.ok(out:match("\nold%s[^\n]-%s%-%s+%-\n"), out)

  local o = assert(json.decode((sh(KMRUN .. " report " .. GT .. " --by strategy --json 2>/dev/null"))))
  local g
  for _, x in ipairs(o.by.strategy) do if x.keys.strategy == "old" then g = x.gpu_time end end
  t.eq(g.state, "not recorded")
  t.eq(g.judged, 2); t.eq(g.recorded, 0)
  t.eq(g.seconds, json.null); t.eq(g.kernel_seconds, json.null); t.eq(g.evals_per_gpu_hour, json.null)
  t.eq(g.stage_seconds.measure, json.null)
  t.eq(o.all.gpu_time.state, "partly recorded")
  t.near(o.all.gpu_time.stage_seconds.measure, 5.0, 1e-9)
  t.near(o.all.gpu_time.measure_over_kernel, 2.5, 1e-9)

  local csvdir = dir .. "/gpucsv"
  out, rc = sh(KMRUN .. " report " .. GT .. " --by strategy --csv " .. csvdir)
  t.eq(rc, 0, out)
  local rows = csv_rows(slurp(csvdir .. "/gpu_time.csv"))
  local col = {}
  for j, h in ipairs(rows[1]) do col[h] = j end
  t.eq(rows[2][1], "new"); t.eq(rows[3][1], "old"); t.eq(rows[4][1], "all")
  t.near(tonumber(rows[2][col.stage_seconds_measure]), 5.0, 1e-9)
  t.near(tonumber(rows[2][col.evals_per_gpu_hour]), 1080, 1e-6)
  t.eq(rows[3][col.stage_seconds_measure], "", "not recorded: an empty cell, not 0")
  t.eq(rows[3][col.seconds], ""); t.eq(rows[3][col.kernel_seconds], "")
  t.eq(rows[3][col.state], "not recorded")
  t.eq(rows[4][col.state], "partly recorded")
  rows = csv_rows(slurp(csvdir .. "/by_strategy.csv"))
  for j, h in ipairs(rows[1]) do col[h] = j end
  t.ok(col.gpu_time_evals_per_gpu_hour and col.gpu_time_measure_over_kernel, table.concat(rows[1], ","))
  t.near(tonumber(rows[2][col.gpu_time_evals_per_gpu_hour]), 1080, 1e-6)
  t.eq(rows[3][col.gpu_time_evals_per_gpu_hour], "")

  local page = dir .. "/gpu.html"
  out, rc = sh(KMRUN .. " report " .. GT .. " --by strategy --html " .. page)
  t.eq(rc, 0, out)
  local html = slurp(page)
  t.ok(html:find("<h2>GPU time by stage</h2>", 1, true), "the HTML has the stage table")
  t.ok(html:find("<td>0 (not recorded)</td>", 1, true), "and says what was not recorded")
  t.ok(html:find("(recorded for 3 of 5 judged evaluation(s))", 1, true), "the header line")

  -- a store from before stage_seconds: one line, no number
  out, rc = sh(KMRUN .. " report " .. GO .. " 2>/dev/null")
  t.eq(rc, 0, out)
  t.ok(out:find("GPU time: not recorded (3 judged evaluation(s) without stage_seconds and kernel_seconds", 1, true), out)
  sec = out:match("\nGPU time by stage %b():\n(.-)\n\n")
  t.ok(sec and not sec:find("%d%.%d"), "no seconds printed as if measured: " .. tostring(sec))
  -- a run that judged nothing on a GPU (the stores above without verdict steps)
  out = sh(KMRUN .. " report " .. A .. " 2>/dev/null")
  t.ok(out:find("GPU time: no evaluation was judged on a GPU", 1, true), out)
  t.ok(not out:find("GPU time by stage", 1, true), out)
end)

-- Renders the page in headless Chromium (tests/report_shot.sh) when one is installed.
local function have_chromium()
  local want = os.getenv("CHROMIUM")
  local _, rc = sh(want and ("command -v '" .. want:gsub("'", "") .. "'")
    or "command -v chromium || command -v chromium-browser || command -v google-chrome")
  return rc == 0
end

-- The per-task map with long series labels (issue 19): the rotated labels must clear the title.
local HM = dir .. "/heatmap.sqlite"
do
  local db = assert(store.open(HM))
  local run = db:begin_run { name = "long labels" }
  for _, st in ipairs { "repair_then_tune_with_a_long_name", "select" } do
    for _, m in ipairs { "a-rather-long-model-name-2025-preview", "m2" } do
      write_episode(db, run, EPS[1], { strategy = st, model = m })
      write_episode(db, run, EPS[3], { strategy = st, model = m })
    end
  end
  db:finish_run(run)
  db:close()
end

-- The title's text box and each rotated label's, from the SVG's own numbers: a label of n
-- characters at font size f is taken as n x 0.6 f wide with an ascent of 0.75 f (a sans-serif
-- average is about 0.5 f), turned 30 degrees up about its anchor.
local function heatmap_boxes(svg)
  local ty, tf = svg:match('<text x="%d+" y="([%d.]+)" text%-anchor="middle" font%-size="(%d+)" font%-weight="bold">')
  local title = { bottom = tonumber(ty) + 0.25 * tonumber(tf) }
  local labels = {}
  for x, y, f, text in svg:gmatch('<text x="([%d.]+)" y="([%d.]+)" text%-anchor="start" font%-size="(%d+)" ' ..
    'transform="rotate%(%-30 [%d.]+ [%d.]+%)">([^<]*)</text>') do
    x, y, f = tonumber(x), tonumber(y), tonumber(f)
    local w = utf8.len(text) * 0.6 * f
    labels[#labels + 1] = { text = text, top = y - w * 0.5 - 0.75 * f * math.sqrt(3) / 2, right = x + w * math.sqrt(3) / 2,
      anchor_y = y }
  end
  return title, labels, tonumber(svg:match('width="(%d+)"'))
end

t.test("the per-task map keeps its rotated column labels clear of its title", function()
  local eps, info = assert(report.load { HM })
  local r = report.build(eps, info)
  t.eq(#r.series, 4)
  for _, mode in ipairs { "speedup", "status" } do
    local svg = report.svg_heatmap(r, mode)
    local title, labels, width = heatmap_boxes(svg)
    t.eq(#labels, 4, svg)
    local first_row = tonumber(svg:match('<rect x="[%d.]+" y="([%d.]+)" width="[%d.]+" height="15"'))
    for _, l in ipairs(labels) do
      t.ok(l.top > title.bottom, string.format("%s: label %q reaches y=%.1f, the title ends at y=%.1f", mode, l.text,
        l.top, title.bottom))
      t.ok(l.right <= width, string.format("label %q ends at x=%.1f, past the width %d", l.text, l.right, width))
      t.ok(l.anchor_y < first_row, "the labels sit above the first row")
    end
    t.ok(svg:find("repair_then_tune_with_a_long_name / a-rather", 1, true), "a long label is kept, or cut with an ellipsis")
  end
end)

if have_chromium() then
  t.test("rendered in Chromium, no column label's box meets the title's", function()
    local eps, info = assert(report.load { HM })
    local page = dir .. "/heatmap.html"
    local f = assert(io.open(page, "w"))
    f:write("<!DOCTYPE html><html><body>", report.svg_heatmap(report.build(eps, info)), [[
<script>
var svg = document.getElementById("chart-heatmap"), out = [];
var texts = svg.querySelectorAll("text");
for (var i = 0; i < texts.length; i++) {
  var b = texts[i].getBoundingClientRect(), s = svg.getBoundingClientRect();
  out.push([texts[i].getAttribute("font-weight") === "bold" ? "T" : (texts[i].getAttribute("transform") ? "L" : "-"),
    (b.top - s.top).toFixed(1), (b.bottom - s.top).toFixed(1), (b.right - s.left).toFixed(1)].join(":"));
}
document.body.setAttribute("data-boxes", out.join(" "));
</script></body></html>]])
    f:close()
    local browser = os.getenv("CHROMIUM") or "chromium"
    local dom = sh(string.format("cd %s && p=$(mktemp -d) && timeout 90 %s --headless --no-sandbox --disable-gpu " ..
      "--no-first-run --disable-extensions --disable-background-networking --disable-component-update " ..
      "--user-data-dir=$p --dump-dom file://%s 2>/dev/null; rm -rf $p", dir, browser, page))
    local boxes = dom:match('data%-boxes="([^"]*)"')
    t.ok(boxes, dom:sub(1, 400))
    local title_bottom, labels = nil, 0
    for kind, top, bottom, right in boxes:gmatch("(%S):([%d.-]+):([%d.-]+):([%d.-]+)") do
      if kind == "T" then title_bottom = tonumber(bottom) end
    end
    t.ok(title_bottom, boxes)
    for kind, top, _, right in boxes:gmatch("(%S):([%d.-]+):([%d.-]+):([%d.-]+)") do
      if kind == "L" then
        labels = labels + 1
        t.ok(tonumber(top) > title_bottom, string.format("a label's box starts at y=%s, the title's ends at %s", top, title_bottom))
        t.ok(tonumber(right) <= 980, "inside the chart: " .. right)
      end
    end
    t.eq(labels, 4, boxes)
  end)
end

t.test("km.report is a facade: each public name is its concern's module's own", function()
  local owner = {
    load = { "load" },
    metrics = { "build", "metrics", "gpu_time", "gpu_time_state", "pass_at", "pass_at_k", "heatmap",
      "fast_p_curve", "baselines_with_data", "thresholds", "dims", "quantile", "FAST_P", "BASELINES", "STAGES" },
    text = { "text", "COLUMNS", "GPU_TIME_NOTE", "BASELINE_NOTE" },
    json = { "json" },
    csv = { "csv_files" },
    svg = { "svg_fastp", "svg_levels", "svg_speedup", "svg_rounds", "svg_cost", "svg_heatmap" },
    html = { "html" },
  }
  for mod, names in pairs(owner) do
    local m = require("km.report." .. mod)
    for _, k in ipairs(names) do t.ok(report[k] ~= nil and report[k] == m[k], "report." .. k .. " is km.report." .. mod .. "." .. k) end
  end
  -- the helpers the modules share stay off the facade
  for _, k in ipairs { "finite", "pct", "table_cells", "esc" } do t.eq(report[k], nil, k) end
end)

if have_chromium() then
  t.test("headless Chromium renders the six charts", function()
    local page, shot = dir .. "/shot.html", dir .. "/shot.png"
    local _, rc = sh(KMRUN .. " report " .. A .. " " .. B .. " --html " .. page)
    t.eq(rc, 0)
    local out
    out, rc = sh("sh " .. ROOT .. "/tests/report_shot.sh " .. page .. " " .. shot)
    t.eq(rc, 0, out)
    local png = slurp(shot)
    t.eq(png:sub(1, 8), "\137PNG\r\n\26\n", "a PNG")
    t.ok(#png > 20000, "a non-trivial screenshot: " .. #png .. " bytes")
    local w, h = string.unpack(">I4I4", png, 17)
    t.eq(w, 1200); t.eq(h, 1600)
    t.eq(tonumber(out:match("png_bytes (%d+)")), #png)
    local sizes = out:match("svg_sizes ([%dx,]+)")
    t.ok(sizes, out)
    local n = 0
    for sw, sh_ in sizes:gmatch("(%d+)x(%d+)") do
      n = n + 1
      t.ok(tonumber(sw) > 100 and tonumber(sh_) > 100, "rendered size " .. sw .. "x" .. sh_)
    end
    t.eq(n, 6, "six SVGs rendered: " .. sizes)
    if os.getenv("KM_KEEP_SHOT") then os.execute("cp " .. shot .. " " .. os.getenv("KM_KEEP_SHOT")) end
  end)
else
  t.skip("headless Chromium renders the six charts", "chromium not installed")
end

t.test("the text report fits 120 columns: wide tables in panels that repeat the labels, long lines wrapped", function()
  for _, args in ipairs { A .. " " .. B .. " --by level --by category", K, GT .. " --by strategy" } do
    local out, rc = sh("env -u COLUMNS " .. KMRUN .. " report " .. args .. " 2>/dev/null")
    t.eq(rc, 0, out)
    for l in out:gmatch("[^\n]+") do t.ok(#l <= 120, string.format("%d columns: %s", #l, l)) end
    -- nothing lost: every word of the wide report is in the narrow one
    local wide = sh("COLUMNS=1000 " .. KMRUN .. " report " .. args .. " 2>/dev/null")
    local have = {}
    for w in out:gmatch("%S+") do have[w] = true end
    for w in wide:gmatch("%S+") do t.ok(have[w], "kept: " .. w) end
  end
  -- the all row of the level table, read across its panels
  local out = sh("env -u COLUMNS " .. KMRUN .. " report " .. A .. " " .. B .. " --by level")
  local heads, alls = 0, {}
  for block in (out .. "\n\n"):gmatch("(.-)\n\n") do
    if block:match("^level ") then
      heads = heads + 1
      alls[#alls + 1] = block:match("\n(all [^\n]*)$")
    end
  end
  t.ok(heads >= 2, "the level table in panels: " .. out)
  t.eq(#alls, heads, out)
  t.ok(alls[1]:match("^all%s+8%s+5 %(62%.5%%%)%s+62%.5%%"), alls[1])
  t.ok(table.concat(alls, " "):match("%s5%.3k"), "tokens/ok in a later panel: " .. table.concat(alls, "\n"))
  -- COLUMNS, where set, is the width
  out = sh("COLUMNS=80 " .. KMRUN .. " report " .. A .. " 2>/dev/null")
  for l in out:gmatch("[^\n]+") do t.ok(#l <= 80, string.format("%d columns: %s", #l, l)) end
end)

os.execute("rm -rf " .. dir)
t.done()
