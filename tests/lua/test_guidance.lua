-- km.run.guidance: the guides in guidance/ load with valid headers, cover every task category,
-- selection follows the documented rules, malformed headers are reported by file and line,
-- and every ```cuda snippet compiles with NVRTC for sm_90 (no GPU needed).
local t = require "km.tap"
local testing = require "km.testing"
local G = require "km.run.guidance"

local ROOT = testing.paths()
local DIR = ROOT .. "/guidance"
local tmpdir, write = testing.tmpdir, testing.write

local function ids(list)
  local out = {}
  for i, g in ipairs(list) do out[i] = g.id end
  return out
end

local function has(list, id)
  for _, g in ipairs(list) do if g.id == id then return true end end
  return false
end

local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

local lib, err, code = G.load(DIR)

t.test("the guidance folder loads, with at least 20 guides", function()
  t.ok(lib, tostring(err) .. " " .. tostring(code))
  t.ok(#lib:ids() >= 20, "only " .. #lib:ids() .. " guides")
end)

if not lib then t.done() end

t.test("the default folder is the repository's guidance/", function()
  local def = assert(G.load())
  t.eq(table.concat(def:ids(), ","), table.concat(lib:ids(), ","))
end)

t.test("every header field is valid", function()
  local known_status = set_of(G.STATUSES)
  local known_cat = set_of(G.CATEGORIES)
  for _, id in ipairs(lib:ids()) do
    local g = lib:get(id)
    t.eq(g.id, id)
    t.eq(g.path:sub(-#id - 4), "/" .. id .. ".md")
    t.ok(type(g.title) == "string" and #g.title >= 8, id .. ": title")
    local ncat = 0
    for c in pairs(g.categories) do
      ncat = ncat + 1
      t.ok(c == "*" or known_cat[c], id .. ": unknown category " .. c)
    end
    t.ok(ncat >= 1, id .. ": no categories")
    local nst = 0
    for s, w in pairs(g.statuses) do
      nst = nst + 1
      t.ok(known_status[s], id .. ": unknown status " .. s)
      t.ok(w == G.WEAK or w == G.NORMAL or w == G.PRIMARY, id .. ": strength")
    end
    t.ok(nst >= 1, id .. ": no statuses")
    t.ok(#g.tags >= 1, id .. ": no tags")
    t.ok(#g.text > 200, id .. ": text too short")
    local lines = select(2, g.text:gsub("\n", "")) + 1
    t.ok(lines >= 20 and lines <= 90, id .. ": " .. lines .. " lines")
  end
end)

t.test("the statuses G knows are the judge's plus too_slow and no_code", function()
  local want = { "compile_error", "load_error", "launch_error", "timeout", "crashed", "wrong_shape",
    "mismatch", "nan_inf", "inputs_modified", "out_of_bounds", "too_fast", "correct" }
  local ok, judge = pcall(require, "km.judge")
  if ok then want = judge.STATUSES end
  local known = set_of(G.STATUSES)
  for _, s in ipairs(want) do t.ok(known[s], "judge status " .. s .. " unknown to km.run.guidance") end
  t.eq(#G.STATUSES, #want + 2)
end)

t.test("every judge status has a guide that marks it", function()
  for _, s in ipairs(G.STATUSES) do
    local list = lib:for_verdict("elementwise", { status = s }, { limit = 1 })
    t.ok(#list == 1 and list[1].statuses[s], "no guide for status " .. s)
  end
end)

t.test("every task category, and every category in use, has a guide", function()
  local task = require "km.task"
  local tasks, errs = task.list(ROOT .. "/tasks")
  t.ok(#tasks > 0, "no tasks found: " .. table.concat(errs or {}, "; "))
  local cats = set_of(G.CATEGORIES)
  for _, tk in ipairs(tasks) do cats[tk.category] = true end
  for cat in pairs(cats) do
    local named = false
    for _, id in ipairs(lib:ids()) do
      if lib:get(id).categories[cat] then named = true end
    end
    t.ok(named, "no guide names the category " .. cat)
    t.ok(#lib:for_task({ category = cat }) == 3, cat)
  end
end)

t.test("a mismatch in a reduction brings the reductions and synchronization guides", function()
  local list = lib:for_verdict({ category = "reduction" }, { status = "mismatch" })
  t.eq(#list, 3)
  t.ok(has(list, "reductions"), table.concat(ids(list), ","))
  t.ok(has(list, "synchronization"), table.concat(ids(list), ","))
  t.eq(list[1].id, "reductions")
end)

t.test("the reductions and synchronization guides list mismatch and nan_inf", function()
  for _, id in ipairs { "reductions", "synchronization" } do
    t.ok(lib:get(id).statuses.mismatch, id)
    t.ok(lib:get(id).statuses.nan_inf, id)
  end
end)

t.test("a compile error brings the NVRTC errors guide first", function()
  for _, cat in ipairs(G.CATEGORIES) do
    local list = lib:for_verdict(cat, { status = "compile_error" })
    t.eq(list[1].id, "nvrtc-errors", cat)
  end
end)

t.test("out_of_bounds and crashed bring the boundaries guide", function()
  for _, cat in ipairs { "elementwise", "gemm", "conv", "scan" } do
    t.eq(lib:for_verdict(cat, { status = "out_of_bounds" })[1].id, "boundaries", cat)
    t.ok(has(lib:for_verdict(cat, { status = "crashed" }), "boundaries"), cat)
  end
end)

t.test("nan_inf, timeout and launch_error bring their guides", function()
  t.ok(has(lib:for_verdict("softmax", "nan_inf"), "online-softmax"))
  t.ok(has(lib:for_verdict("reduction", "nan_inf"), "atomics"))
  t.ok(has(lib:for_verdict("elementwise", "nan_inf"), "numerics"))
  t.eq(lib:for_verdict("normalization", "timeout")[1].id, "synchronization")
  t.eq(lib:for_verdict("elementwise", "launch_error")[1].id, "launch-config")
  t.eq(lib:for_verdict("elementwise", "too_fast")[1].id, "roofline")
  t.eq(lib:for_verdict("elementwise", "inputs_modified")[1].id, "reading-verdicts")
end)

t.test("a correct kernel brings the category's optimization guides", function()
  local el = ids(lib:for_verdict("elementwise", { status = "correct" }))
  t.ok(set_of(el)["coalescing"] and set_of(el)["vectorized-loads"], table.concat(el, ","))
  local gm = ids(lib:for_verdict("gemm", { status = "correct" }))
  t.ok(set_of(gm)["gemm-tiling"] and set_of(gm)["tensor-cores"], table.concat(gm, ","))
  local rd = ids(lib:for_verdict("reduction", { status = "correct" }))
  t.ok(set_of(rd)["reductions"], table.concat(rd, ","))
  t.eq(table.concat(ids(lib:for_verdict("elementwise", "too_slow", { limit = 50 })), ","),
    table.concat(ids(lib:for_verdict("elementwise", { status = "too_slow" }, { limit = 50 })), ","))
end)

t.test("ranking: category and status, then status alone, then category alone", function()
  local d = tmpdir()
  local function guide(id, cats, sts)
    write(d .. "/" .. id .. ".md", ("---\nid: %s\ntitle: Guide %s\ncategories: %s\nstatuses: %s\ntags: x\n---\nText of %s.\n")
      :format(id, id, cats, sts, id))
  end
  guide("both", "gemm", "mismatch")
  guide("both-star", "*", "mismatch")
  guide("both-primary", "gemm, conv", "mismatch!")
  guide("status-only", "scan", "mismatch")
  guide("weak-status-only", "scan", "mismatch?")
  guide("cat-only", "gemm", "correct")
  guide("neither", "scan", "correct")
  local l = assert(G.load(d))
  local got = ids(l:for_verdict("gemm", { status = "mismatch" }, { limit = 10 }))
  t.eq(table.concat(got, ","), "both-primary,both,both-star,status-only,cat-only")
  got = ids(l:for_task("gemm", { limit = 10 }))
  t.eq(table.concat(got, ","), "cat-only,both,both-primary,both-star")
  os.execute("rm -rf '" .. d .. "'")
  -- a correct kernel that is slow (speedup < 1, or under half the roofline) also matches too_slow
  d = tmpdir()
  guide("opt", "gemm", "correct!")
  guide("slow", "gemm", "correct, too_slow!")
  l = assert(G.load(d))
  local function order(v) return table.concat(ids(l:for_verdict("gemm", v)), ",") end
  t.eq(order({ status = "correct", speedup = 2, roofline = { fraction = 0.8 } }), "opt,slow")
  t.eq(order({ status = "correct", speedup = 0.7 }), "slow,opt")
  t.eq(order({ status = "correct", speedup = 2, roofline = { fraction = 0.3 } }), "slow,opt")
  t.eq(order("correct"), "opt,slow")
  os.execute("rm -rf '" .. d .. "'")
end)

t.test("limit, exclude (set or list) and determinism", function()
  local task = { category = "reduction" }
  local v = { status = "mismatch" }
  local first = lib:for_verdict(task, v)
  t.eq(#first, 3)
  t.eq(#lib:for_verdict(task, v, { limit = 1 }), 1)
  t.eq(#lib:for_verdict(task, v, { limit = 0 }), 0)
  local shown = {}
  for _, g in ipairs(first) do shown[g.id] = true end
  local second = lib:for_verdict(task, v, { exclude = shown })
  t.eq(#second, 3)
  for _, g in ipairs(second) do t.ok(not shown[g.id], "repeated " .. g.id) end
  local as_list = lib:for_verdict(task, v, { exclude = ids(first) })
  t.eq(table.concat(ids(as_list), ","), table.concat(ids(second), ","))
  -- the same call gives the same answer, also after reloading
  local again = assert(G.load(DIR))
  for _ = 1, 5 do
    t.eq(table.concat(ids(again:for_verdict(task, v, { limit = 30 })), ","), table.concat(ids(lib:for_verdict(task, v, { limit = 30 })), ","))
    t.eq(table.concat(ids(again:for_task(task, { limit = 30 })), ","), table.concat(ids(lib:for_task(task, { limit = 30 })), ","))
  end
  -- a category nobody names still gets the guides for every category
  local other = lib:for_task("no_such_category")
  t.eq(#other, 3)
  for _, g in ipairs(other) do t.ok(g.categories["*"], g.id) end
end)

t.test("misuse raises", function()
  t.raises(function() lib:for_task(42) end, "task must be")
  t.raises(function() lib:for_verdict("gemm", 42) end, "verdict must be")
  t.raises(function() lib:for_task("gemm", { limit = -1 }) end, "limit")
  t.raises(function() lib:for_task("gemm", { exclude = "x" }) end, "exclude")
  t.raises(function() lib:render({ "no-such-guide" }) end, "no guide")
  t.raises(function() G.load(42) end, "dir must be")
end)

t.test("render joins titles and texts; cuda-fragment shows as cuda", function()
  local list = lib:for_verdict("reduction", { status = "mismatch" })
  local md = lib:render(list)
  for _, g in ipairs(list) do
    t.ok(md:find("## " .. g.title, 1, true), g.id)
    t.ok(md:find(g.text:sub(1, 60), 1, true), g.id)
  end
  t.eq(lib:render({}), "")
  t.eq(lib:render({ "coalescing" }), lib:render({ lib:get("coalescing") }))
  local g = assert(G.parse("---\nid: f\ntitle: Fragment\ncategories: *\nstatuses: correct\ntags: x\n---\n```cuda-fragment\nx = 1;\n```\n", "f.md"))
  local out = lib:render({ g })
  t.ok(out:find("```cuda\nx = 1;", 1, true), out)
  t.ok(not out:find("cuda-fragment", 1, true), out)
end)

t.test("search finds guides by title, tags and text", function()
  local r = lib:search("bank conflicts")
  t.ok(#r >= 1)
  t.eq(r[1].id, "shared-memory-tiling")
  t.eq(lib:search("wmma")[1].id, "tensor-cores")
  t.eq(lib:search({ "prefix", "sum" })[1].id, "scans")
  t.eq(lib:search("__launch_bounds__")[1].id, "occupancy")
  t.eq(#lib:search("zzzqqq xxyyzz"), 0)
  t.eq(lib:search("zzzqqq wmma")[1].id, "tensor-cores")
  t.eq(#lib:search("memory", { limit = 2 }), 2)
end)

----------------------------------------------------------------------------------------
-- malformed headers

local BAD = {
  { "no header", "# Title\n\ntext\n", 1, "must start with a '---' line" },
  { "unclosed", "---\nid: x\ntitle: T\n", 3, "not closed" },
  { "blank line", "---\nid: x\n\ntitle: T\n---\ntext\n", 3, "blank line in the header" },
  { "unknown field", "---\nid: x\ntitle: T\nauthor: me\n---\ntext\n", 4, "unknown field 'author'" },
  { "missing tags", "---\nid: x\ntitle: T\ncategories: *\nstatuses: correct\n---\ntext\n", 6, "missing field 'tags'" },
  { "bad status", "---\nid: x\ntitle: T\ncategories: *\nstatuses: correct, mismatc\ntags: a\n---\ntext\n", 5, "unknown status 'mismatc'" },
  { "duplicate field", "---\nid: x\ntitle: T\ntitle: U\n---\ntext\n", 4, "appears twice" },
  { "star mixed", "---\nid: x\ntitle: T\ncategories: *, gemm\nstatuses: correct\ntags: a\n---\ntext\n", 4, "'*' must stand alone" },
  { "empty item", "---\nid: x\ntitle: T\ncategories: gemm,,conv\nstatuses: correct\ntags: a\n---\ntext\n", 4, "empty item" },
  { "no body", "---\nid: x\ntitle: T\ncategories: *\nstatuses: correct\ntags: a\n---\n\n", 7, "no text" },
  { "not key value", "---\nid: x\njust words\n---\ntext\n", 3, "expected 'field: value'" },
  { "empty value", "---\nid: x\ntitle:\n---\ntext\n", 3, "empty value" },
  { "unclosed fence", "---\nid: x\ntitle: T\ncategories: *\nstatuses: correct\ntags: a\n---\n```cuda\nint x;\n", 8, "not closed" },
}

t.test("a malformed header gives nil, a message naming the file and line, GUIDANCE_INVALID", function()
  for _, case in ipairs(BAD) do
    local name, src, line, what = case[1], case[2], case[3], case[4]
    local d = tmpdir()
    write(d .. "/ok.md", "---\nid: ok\ntitle: Fine\ncategories: *\nstatuses: correct\ntags: a\n---\nText.\n")
    write(d .. "/x.md", src)
    local l, msg, c = G.load(d)
    t.eq(l, nil, name)
    t.eq(c, "GUIDANCE_INVALID", name)
    t.ok(msg:find(d .. "/x.md:" .. line .. ":", 1, true), name .. ": " .. tostring(msg))
    t.ok(msg:find(what, 1, true), name .. ": " .. tostring(msg))
    os.execute("rm -rf '" .. d .. "'")
  end
end)

t.test("an id that is not the file name is refused", function()
  local d = tmpdir()
  write(d .. "/one.md", "---\nid: two\ntitle: T\ncategories: *\nstatuses: correct\ntags: a\n---\ntext\n")
  local l, msg, c = G.load(d)
  t.eq(l, nil)
  t.eq(c, "GUIDANCE_INVALID")
  t.ok(msg:find("one.md:2:", 1, true) and msg:find("must equal the file name", 1, true), msg)
  os.execute("rm -rf '" .. d .. "'")
end)

t.test("G.parse reports like G.load; a missing folder is GUIDANCE_NOT_FOUND", function()
  local g, msg, c = G.parse("---\nid: x\n", "mem.md")
  t.eq(g, nil)
  t.eq(c, "GUIDANCE_INVALID")
  t.ok(msg:find("mem.md:", 1, true), msg)
  local l, m2, c2 = G.load("/nonexistent/guidance")
  t.eq(l, nil)
  t.eq(c2, "GUIDANCE_NOT_FOUND")
  t.ok(m2:find("/nonexistent/guidance", 1, true), m2)
  -- README.md in the folder is not a guide
  local d = tmpdir()
  write(d .. "/README.md", "# not a guide\n")
  local empty = assert(G.load(d))
  t.eq(#empty:ids(), 0)
  os.execute("rm -rf '" .. d .. "'")
end)

----------------------------------------------------------------------------------------
-- snippets

t.test("every ```cuda snippet compiles with NVRTC for sm_90", function()
  local nvrtc = require "km.nvrtc"
  local cache = tmpdir()
  nvrtc.set_cache_dir(cache)
  local total, kernels, fragments = 0, 0, 0
  for _, id in ipairs(lib:ids()) do
    local g = lib:get(id)
    local n = 0
    for lang, body in g.text:gmatch("```([%w%-]*)\n(.-)\n```") do
      if lang == "cuda" then
        n = n + 1
        total = total + 1
        local r, e = nvrtc.compile(body, { arch = "sm_90", name = id .. "-" .. n .. ".cu" })
        t.ok(r, id .. " snippet " .. n .. " does not compile:\n" .. tostring(e))
        if r then
          t.eq(r.log, "", id .. " snippet " .. n .. " warns")
          if next(r.kernels) then kernels = kernels + 1 end
        end
      elseif lang == "cuda-fragment" then
        fragments = fragments + 1
      end
    end
  end
  t.note(("%d cuda snippets (%d with extern \"C\" kernels), %d fragments"):format(total, kernels, fragments))
  t.ok(total >= 20, "only " .. total .. " compiled snippets")
  t.ok(kernels >= total * 0.8, "most snippets should be complete kernels")
  nvrtc.set_cache_dir(nil)
  os.execute("rm -rf '" .. cache .. "'")
end)

t.done()
