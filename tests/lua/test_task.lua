-- km.task: loading and validating tasks, expressions, shapes, parameters, candidates; and
-- the whole suite under tasks/ passing `kmrun tasks check` (NVRTC, no GPU needed).
local t = require "km.tap"
local task = require "km.task"

local ROOT = (arg[0]:match("^(.*)/tests/lua/") or ".")
local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
local dir = os.tmpname(); os.remove(dir); os.execute("mkdir -p " .. dir)

-- a copy of l1_relu whose task.lua is rewritten by `edit`
local function variant(name, edit)
  local d = dir .. "/" .. name
  os.execute("rm -rf " .. d .. " && cp -r " .. ROOT .. "/tasks/l1_relu " .. d)
  local src = io.open(d .. "/task.lua"):read("a"):gsub('"l1_relu"', '"' .. name .. '"')
  src = edit and edit(src) or src
  local f = io.open(d .. "/task.lua", "w"); f:write(src); f:close()
  return d
end

t.test("a task loads with its files read", function()
  local tk = assert(task.load(ROOT .. "/tasks/l1_relu"))
  t.eq(tk.name, "l1_relu")
  t.ok(tk.description_text:find("rectified", 1, true))
  t.ok(tk.reference.source_text:find("relu_ref", 1, true))
  t.eq(task.shape_of(tk.inputs[1], tk.shapes[1])[1], 1 << 28)
  t.eq(task.eval_expr(tk.bytes, tk.shapes[1]), 8 * (1 << 28))
end)

t.test("errors name the file and the field", function()
  local cases = {
    { "bad_level", function(s) return s:gsub("level = 1", "level = 7") end, "task.lua: level: must be 1, 2 or 3" },
    { "bad_dtype", function(s) return s:gsub('dtype = "f32", shape = { "n" }, init', 'dtype = "f33", shape = { "n" }, init') end, "inputs[1].dtype: unknown dtype 'f33'" },
    { "bad_shape", function(s) return s:gsub('shape = { "n" }, init', 'shape = { "m" }, init') end, "shapes[1]" },
    { "no_tol", function(s) return s:gsub("tolerance = { f32 = { atol = 0, rtol = 0 } },", "tolerance = {},") end, "tolerance.f32" },
    { "bad_init", function(s) return s:gsub('init = { "uniform", %-1, 1 }', 'init = { "gauss", 0, 1 }') end, "inputs[1].init" },
    { "bad_default", function(s) return s:gsub("default = { BLOCK = 256 }", "default = { BLOCK = 100 }") end, "starter.default.BLOCK" },
    { "syntax", function(s) return s .. " )" end, "task.lua: syntax" },
  }
  for _, c in ipairs(cases) do
    local d = variant(c[1], c[2])
    local tk, err, code = task.load(d)
    t.eq(tk, nil, c[1])
    t.eq(code, "TASK_INVALID")
    t.ok(err:find(d .. "/task.lua", 1, true), err)
    t.ok(err:find(c[3], 1, true), c[1] .. ": " .. err)
  end
  local tk, err = task.load(dir .. "/nonexistent")
  t.eq(tk, nil)
  t.ok(err:find("cannot read", 1, true), err)
  local d = variant("wrong_name")
  os.execute("mv " .. d .. " " .. dir .. "/renamed")
  tk, err = task.load(dir .. "/renamed")
  t.ok(err:find("does not match the folder", 1, true), err)
end)

t.test("list loads every task folder and reports the invalid ones", function()
  local tasks, errors = task.list(dir)
  t.ok(#errors >= 7, #errors .. " errors")
  local tasks2 = task.list(ROOT .. "/tasks")
  t.ok(#tasks2 >= 40, #tasks2 .. " tasks")
  for i = 2, #tasks2 do t.ok(tasks2[i - 1].name < tasks2[i].name, "sorted") end
end)

t.test("expressions, parameters and candidates", function()
  t.eq(task.eval_expr("m*k + math.max(n, 2)", { m = 2, k = 3, n = 1 }), 8)
  t.eq(task.eval_expr("(n + 1) // 2", { n = 7 }), 4)
  t.raises(function() task.eval_expr("q * 2", { n = 1 }) end, "does not evaluate")
  local p = task.default_params("#ifndef BLOCK\n#define BLOCK 256\n#endif\n#ifndef TILE\n  #define TILE (32)\n#endif\n#ifndef A\n#define B 1\n#endif\n#ifndef S\n#define S 0.5f\n#endif")
  t.eq(p.BLOCK, 256)
  t.eq(p.TILE, 32)
  t.eq(p.A, nil)
  t.eq(p.S, 0.5)
  local tk = assert(task.load(ROOT .. "/tasks/l1_relu"))
  t.eq(task.params_ok(tk, { BLOCK = 512 }), true)
  local ok, why = task.params_ok(tk, { BLOCK = 100 })
  t.eq(ok, false)
  t.ok(why:find("value set", 1, true))
  local c = assert(task.candidate(ROOT .. "/tasks/l1_relu/starter"))
  t.ok(c.source:find("relu", 1, true) and c.launch:find("k.relu", 1, true))
  local none, err, code = task.candidate(dir)
  t.eq(none, nil)
  t.eq(code, "CANDIDATE_INVALID")
  t.ok(err:find("kernel.cu", 1, true))
end)

t.test("the suite passes `kmrun tasks check`: every reference and starter compiles", function()
  local p = io.popen(KMRUN .. " tasks check " .. ROOT .. "/tasks 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("rc=0", 1, true), out:sub(-2000))
  local n = out:match("(%d+) task%(s%), 0 failed")
  t.ok(tonumber(n) and tonumber(n) >= 40, out:sub(-300))
end)

os.execute("rm -rf " .. dir)
t.done()
