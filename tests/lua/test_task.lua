-- km.task: loading and validating tasks, expressions, shapes, parameters, candidates; and
-- the whole suite under tasks/ passing `kmrun tasks check` (NVRTC, no GPU needed).
local t = require "km.tap"
local testing = require "km.testing"
local task = require "km.task"
local wall = require("km.timing").wall

local ROOT, KMRUN = testing.paths()
local dir = testing.tmpdir()

-- a copy of l1_relu whose task.lua is rewritten by `edit`
local function variant(name, edit) return testing.task_copy(ROOT .. "/tasks/l1_relu", dir, name, edit) end

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
  t.raises(function() task.eval_expr("q * 2", { n = 1 }) end, "expression 'q * 2': q is not a symbol of the shape set {n=1}")
  t.raises(function() task.eval_expr("n > 0", { n = 1 }) end, "does not evaluate to a number with {n=1}: it gives boolean")
  t.eq(task.eval_expr("n * 1e3 + 0x10", { n = 2 }), 2016, "a number's exponent and hex digits are not symbols")
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

-- the host's libraries as they were: no task may change them
local HOST = {}
for _, name in ipairs { "math", "string", "table" } do
  HOST[name] = {}
  for k, v in pairs(_G[name]) do HOST[name][k] = v end
end
local STRING_INDEX = getmetatable("").__index
local function host_untouched()
  for name, saved in pairs(HOST) do
    for k, v in pairs(saved) do t.eq(_G[name][k], v, name .. "." .. k) end
    for k in pairs(_G[name]) do t.ok(saved[k] ~= nil, name .. "." .. k .. " was added") end
  end
  t.eq(getmetatable("").__index, STRING_INDEX)
  t.eq(math.max(1, 2), 2)
end

-- loads a variant of l1_relu; asserts it is refused with `want` after "dir/task.lua: ",
-- within `seconds` of wall clock
local function refused(name, edit, want, seconds)
  local d = variant(name, edit)
  local t0 = wall()
  local tk, err, code = task.load(d)
  local dt = wall() - t0
  t.eq(tk, nil, name)
  t.eq(code, "TASK_INVALID", name)
  local prefix = d .. "/task.lua: "
  t.ok(err:sub(1, #prefix) == prefix and err:find(want, #prefix + 1, true), name .. ": " .. tostring(err))
  t.ok(dt < (seconds or 1), string.format("%s: took %.3f s", name, dt))
  return err, d
end

local function prepend(code) return function(s) return code .. "\n" .. s end end

t.test("task.lua runs in the sandbox: loops and bombs stop at the budget, patterns are not offered", function()
  refused("endless", prepend("while true do end"), "evaluation: instruction budget exceeded")
  refused("pcall_loop", prepend("for i = 1, 1e9 do pcall(function() while true do end end) end"), "evaluation: instruction budget exceeded")
  refused("xpcall_handler", prepend("xpcall(error, function() while true do end end)"), "evaluation: instruction budget exceeded")
  refused("pattern", prepend("string.find(('a'):rep(30), ('a?'):rep(30) .. ('a'):rep(30))"), "evaluation: ")
  refused("pattern_offered", prepend("string.find(('a'):rep(30), ('a?'):rep(30) .. ('a'):rep(30))"), "patterns are not offered")
  refused("move", prepend("table.move({}, 1, 1 << 40, 2)"), "evaluation: instruction budget exceeded")
  refused("string_bomb", prepend("local s = 'x' for i = 1, 40 do s = s .. s end"), "evaluation: memory budget exceeded", 5)
  refused("table_bomb", prepend("local t = {} for i = 1, 1e9 do t[i] = { i } end"), "evaluation: memory budget exceeded", 5)
  refused("wide_bomb", prepend("local t = {} local s = ('x'):rep(1 << 20) for i = 1, 1e9 do t[i] = s .. i end"),
    "evaluation: memory budget exceeded", 5)
  refused("no_io", prepend("io.open('/etc/passwd')"), "evaluation: ")
  refused("no_require", prepend("require 'os'"), "evaluation: ")
  host_untouched()
end)

t.test("task.lua has its own math, string and table: assigning them reaches no other task", function()
  local d = variant("assigns_math", prepend([[math.max = function() return 0 end
    math.floor, string.format, table.concat = nil, nil, nil]]))
  local tk = assert(task.load(d))
  t.eq(tk.name, "assigns_math")
  host_untouched()
  t.eq(task.eval_expr("math.max(n, 2)", { n = 1 }), 2, "expressions see a fresh math")
  local relu = assert(task.load(ROOT .. "/tasks/l1_relu"))
  t.eq(task.eval_expr(relu.bytes, relu.shapes[1]), 8 * (1 << 28))
end)

t.test("what task.lua returns is copied as plain data", function()
  refused("returns_function", function(s) return s:gsub("{ n = 1 }", "{ n = function() return 1 end }") end,
    "shapes[2].n: a function is not data")
  refused("returns_cycle", function(s) return "local t = (function() " .. s .. " end)() t.self = t return t" end,
    "nested deeper than")
  refused("returns_string", function() return "return 'x'" end, "return value: must return a table, got string")
  refused("too_many_shapes", function(s) return s:gsub("shapes = {", "shapes = { " .. ("{ n = 1 }, "):rep(70)) end,
    "shapes: has 74 shape sets; the limit is 64")
end)

t.test("expressions run in the sandbox, with a budget", function()
  local t0 = wall()
  t.raises(function() task.eval_expr("('').rep('', 1 << 62)", {}) end, "instruction budget exceeded")
  t.raises(function() task.eval_expr("('a'):rep(30):find(('a?'):rep(30) .. ('a'):rep(30))", {}) end, "bad expression")
  t.raises(function() task.eval_expr(("1+"):rep(5000) .. "1", {}) end, "the limit is")
  t.ok(wall() - t0 < 1)
  refused("expr_bomb", function(s) return s:gsub('bytes = "8%*n"', [[bytes = "('').rep('', 1 << 62)"]]) end,
    "bytes: expression")
  t.eq(task.eval_expr("n * 2 + math.floor(3.5)", { n = 4 }), 11)
  host_untouched()
end)

t.test("files a task names must resolve inside its folder", function()
  local cases = {
    { "dotdot", function(s) return s:gsub('source = "reference.cu"', 'source = "../../../../../../etc/passwd"') end,
      "reference.source: '../../../../../../etc/passwd' is outside the folder (it has a '..' component)" },
    { "dotdot_inside", function(s) return s:gsub('launch = "reference.lua"', 'launch = "starter/../reference.lua"') end,
      "reference.launch: 'starter/../reference.lua' is outside the folder (it has a '..' component)" },
    { "absolute", function(s) return s:gsub('launch = "reference.lua"', 'launch = "/etc/passwd"') end,
      "reference.launch: '/etc/passwd' is an absolute path" },
    { "abs_description", function(s) return s:gsub('description = "description.md"', 'description = "/etc/motd.md"') end,
      "description: '/etc/motd.md' is an absolute path" },
    { "not_a_name", function(s) return s:gsub('source = "reference.cu"', "source = 42") end, "reference: must be" },
    { "missing", function(s) return s:gsub('source = "reference.cu"', 'source = "nothere.cu"') end,
      "reference.source: cannot read" },
  }
  for _, c in ipairs(cases) do refused(c[1], c[2], c[3]) end
  -- symlinks out of the folder: a file, a math file, the starter folder, a file in the starter
  local _, d = refused("link_description", function(s)
    local dd = dir .. "/link_description"
    os.execute("ln -sf /etc/passwd " .. dd .. "/evil.md")
    return s:gsub('description = "description.md"', 'description = "evil.md"')
  end, "description: 'evil.md' resolves to /etc/passwd, outside the folder")
  refused("link_math", function(s)
    os.execute("ln -sf /etc/hostname " .. dir .. "/link_math/m.txt")
    return s:gsub('math = "[^"]*"', 'math = "m.txt"')
  end, "math: 'm.txt' resolves to /etc/hostname, outside the folder")
  refused("link_starter", function(s)
    os.execute("rm -rf " .. dir .. "/link_starter/starter && ln -s " .. ROOT .. "/tasks/l1_gelu/starter " .. dir .. "/link_starter/starter")
    return s
  end, "starter.dir: 'starter' resolves to")
  refused("link_in_starter", function(s)
    os.execute("ln -sf " .. ROOT .. "/tasks/l1_gelu/starter/kernel.cu " .. dir .. "/link_in_starter/starter/kernel.cu")
    return s
  end, "starter.dir: 'starter/kernel.cu' resolves to")
  -- a FIFO would block a read forever; a huge file is refused by its size
  local err = refused("fifo", function(s)
    os.execute("mkfifo " .. dir .. "/fifo/pipe.md")
    return s:gsub('description = "description.md"', 'description = "pipe.md"')
  end, "description: 'pipe.md' is not a regular file")
  refused("huge", function(s)
    os.execute("truncate -s 17M " .. dir .. "/huge/big.md")
    return s:gsub('description = "description.md"', 'description = "big.md"')
  end, "description: 'big.md' is 17825792 bytes; the limit is 16777216")
  -- a task.lua that is itself a link out of the folder
  local d2 = variant("link_task")
  os.execute("mv " .. d2 .. "/task.lua " .. dir .. "/outside_task.lua && ln -s " .. dir .. "/outside_task.lua " .. d2 .. "/task.lua")
  local tk
  tk, err = task.load(d2)
  t.eq(tk, nil)
  t.ok(err:find("task.lua: file: 'task.lua' resolves to", 1, true), err)
  -- a FIFO as task.lua: listed as an error, never opened
  local lst = dir .. "/listing"
  os.execute("mkdir -p " .. lst .. "/fifo_task && mkfifo " .. lst .. "/fifo_task/task.lua")
  local t0 = wall()
  local listed, errors = task.list(lst)
  t.eq(#listed, 0)
  t.eq(#errors, 1)
  t.ok(errors[1]:find("fifo_task/task.lua: file: 'task.lua' is not a regular file", 1, true), errors[1])
  t.ok(wall() - t0 < 1)
  -- a link that stays inside the folder is fine
  local d3 = variant("link_inside", function(s)
    os.execute("mkdir -p " .. dir .. "/link_inside/docs && mv " .. dir .. "/link_inside/description.md " .. dir
      .. "/link_inside/docs/ && ln -s docs/description.md " .. dir .. "/link_inside/description.md")
    return s
  end)
  tk = assert(task.load(d3))
  t.ok(tk.description_text:find("rectified", 1, true))
  -- the starter is read inside the folder when it is used, too
  tk.starter.dir = "../l1_relu_elsewhere"
  local st, serr = task.starter(tk)
  t.eq(st, nil)
  t.ok(serr:find("outside the folder", 1, true), serr)
  t.ok(d ~= nil)
end)

t.test("a candidate's params.lua runs in the sandbox; its files stay in its folder", function()
  local c = dir .. "/cand"
  os.execute("rm -rf " .. c .. " && cp -r " .. ROOT .. "/tasks/l1_relu/starter " .. c)
  local function params(text)
    local f = io.open(c .. "/params.lua", "w"); f:write(text); f:close()
    local t0 = wall()
    local cand, err, code = task.candidate(c)
    t.ok(wall() - t0 < 1, "bounded")
    return cand, err, code
  end
  local cand = assert(params("return { BLOCK = 512 }"))
  t.eq(cand.params.BLOCK, 512)
  local none, err, code = params("while true do end")
  t.eq(none, nil)
  t.eq(code, "CANDIDATE_INVALID")
  t.eq(err, c .. "/params.lua: evaluation: instruction budget exceeded (10000000 instructions; an endless loop?)")
  none, err = params("local s = 'x' for i = 1, 40 do s = s .. s end")
  t.ok(err:find("params.lua: evaluation: memory budget exceeded", 1, true), err)
  none, err = params("return { BLOCK = function() end }")
  t.eq(err, c .. "/params.lua: BLOCK: a function is not data")
  none, err = params("math.max = nil return 1")
  t.eq(err, c .. "/params.lua: return value: must return a table, got number")
  os.remove(c .. "/params.lua")
  os.execute("ln -s /etc/passwd " .. c .. "/params.lua")
  none, err = task.candidate(c)
  t.ok(err:find("params.lua: 'params.lua' resolves to /etc/passwd", 1, true), err)
  os.remove(c .. "/params.lua")
  os.execute("rm " .. c .. "/kernel.cu && ln -s /etc/passwd " .. c .. "/kernel.cu")
  none, err = task.candidate(c)
  t.ok(err:find("kernel.cu: 'kernel.cu' resolves to /etc/passwd", 1, true), err)
  host_untouched()
end)

t.test("honest tasks still load: the evaluator's own test task and the suite", function()
  local rs = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))
  t.eq(task.eval_expr(rs.flops, rs.shapes[1]), 4096 * 4096)
  local st = assert(task.starter(rs))
  t.ok(st.source:find("__global__", 1, true))
  local tasks, errors = task.list(ROOT .. "/tasks")
  t.eq(#errors, 0, table.concat(errors, "\n"))
  t.ok(#tasks >= 40, #tasks .. " tasks")
  host_untouched()
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
