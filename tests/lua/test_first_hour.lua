-- A new user's first hour on a machine without a GPU (issue 39), one test per thing that
-- must hold, each through the command a user types:
--   1. what the machine lacks (PyTorch) is "not checked" by kmrun tasks lint: said once,
--      never a flag, never kept, so the demo's gate drops nothing; no `nil` in its output;
--   2. a compile-only verdict is `compiled` only when the kernels the launch code calls are
--      defined, and a compile error exits 1 from kmrun eval and from a strategy run alike;
--   3. errors name the user's file and field, a --store in a missing folder is refused, a
--      folder of problem files without PyTorch gets its error alone (files in numeric
--      order), and merge says what it skipped and why;
--   4. help and docs say what the program does (tasks lint, the caches, the store's schema),
--      and a passing test prints nothing under `make test`;
--   5. every test file runs with empty caches of its own (tests/exec).
-- PyTorch is hidden from the Python kmrun starts by a `torch` package on PYTHONPATH that
-- fails to import, whatever KM_PYTHON names; where the real one is there (KM_PYTHON), lint's
-- CPU run and its kept result are checked too.
local t = require "km.tap"
local json = require "km.json"
local testing = require "km.testing"
local sys = require "km.sys"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local NO_GPU = not require("km.cuda").available()

-- a Python path on which `import torch` fails as it does where torch is not installed
local HIDE = DIR .. "/hide-torch"
assert(sys.mkdir(HIDE .. "/torch"))
testing.write(HIDE .. "/torch/__init__.py", 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
local NO_TORCH = "PYTHONPATH=" .. HIDE

-- kmrun ARGS with the environment ENV (NAME=value words) -> stdout, stderr, rc
local function kmrun(env, args)
  return testing.run(fmt("cd %s && env %s %s %s", DIR, env or "", KMRUN, args))
end

local function files_in(dir)
  local out = {}
  local function walk(d)
    for _, name in ipairs(sys.readdir(d) or {}) do
      local p = d .. "/" .. name
      if sys.readdir(p) then walk(p) else out[#out + 1] = p end
    end
  end
  walk(dir)
  return out
end

local RELU = DIR .. "/tasks/l1_relu"
testing.copy_tree(ROOT .. "/tasks/l1_relu", RELU)

----------------------------------------------------------------------------------------
-- 1. lint: a missing PyTorch is a fact about the machine

t.test("1. tasks lint without PyTorch: unchecked, said once, never flagged nor kept; the gate drops nothing", function()
  local lints = DIR .. "/lint1"
  local env = NO_TORCH .. " KM_LINT_DIR=" .. lints
  local out, err, rc = kmrun(env, "tasks lint " .. RELU .. " " .. ROOT .. "/tests/tasks/t_rowsum")
  t.eq(rc, 0, out .. err)
  t.ok(out:find("\nunchecked  l1_relu@own ", 1, true) or out:find("^unchecked  l1_relu@own "), out)
  t.ok(not out:find("FLAGGED", 1, true) and not out:find("reference fails", 1, true), out)
  t.ok(out:find("2 task-precision(s) linted, 0 flagged, 2 not checked here (nothing kept for them)", 1, true), out)
  local _, n = out:gsub("PyTorch is not available here", "")
  t.eq(n, 1, "the reason said once: " .. out)
  t.ok(not out:find("nil", 1, true), "no nil: " .. out)
  if NO_GPU then t.ok(out:find("no reference ran", 1, true) and not out:find("ran on the CPU", 1, true), out) end
  t.eq(#files_in(lints), 0, "nothing kept")
  -- the demo's gate: the task runs (offline, its starter compiled), nothing skipped
  out, err, rc = kmrun(env .. " KM_CACHE_DIR=" .. DIR .. "/nv1", "implement " .. RELU ..
    " --provider offline --quiet --store " .. DIR .. "/gate.sqlite")
  t.ok(not err:find("flagged", 1, true), err)
  t.eq(rc, NO_GPU and 3 or 0, out .. err)
end)

t.test("1. lint results: a machine's lack refused by put, a flag without a shape printed without nil", function()
  local lint = require "km.task.lint"
  local task = require "km.task"
  local tk = assert(task.load(RELU))
  local res = lint.run(tk, { backend = { where = "cpu",
    open = function() return nil, "PyTorch is not available here: no torch", "NO_PYTORCH" end } })
  t.eq(#res.flags, 0, "not a flag")
  t.eq(res.machine and res.machine.code, "NO_PYTORCH")
  t.ok(lint.transient(res))
  local ok, why = lint.put(tk, res)
  t.eq(ok, nil) t.ok(tostring(why):find("not kept", 1, true), why)
  -- a reference that does not load is flagged at every shape: no "shape nil", held-out or not
  res = lint.run(tk, { backend = { where = "cpu", open = function() return nil, "SyntaxError: bad" end } })
  res.heldout = 2
  t.eq(lint.reasons(res)[1], "reference_error")
  local text = lint.format { res }
  t.ok(text:find("reference fails   every shape  SyntaxError: bad", 1, true), text)
  t.ok(not text:find("nil", 1, true) and not text:find("held-out)  Syntax", 1, true), text)
end)

local kb_ok = require("km.task.kernelbench").available()
if kb_ok then
  t.test("1. tasks lint with PyTorch: the reference runs on the CPU, its result kept under what it depended on", function()
    local lints = DIR .. "/lint-torch"
    local out, err, rc = kmrun("KM_LINT_DIR=" .. lints, "tasks lint " .. RELU .. " --cpu --json")
    t.eq(rc, 0, out .. err)
    local r = json.decode(out).results[1]
    t.eq(r.where, "cpu") t.eq(#r.flags, 0, out) t.eq(r.machine, nil)
    t.ok(#files_in(lints) > 0, "kept")
    out = kmrun("KM_LINT_DIR=" .. lints, "tasks lint " .. RELU .. " --cpu --json")
    t.eq(json.decode(out).results[1].cached, true, "read back")
    -- torch hidden: linted again, nothing checked and nothing kept, the kept result unharmed
    local kept = {}
    for _, p in ipairs(files_in(lints)) do kept[p] = testing.read(p) end
    out = kmrun(NO_TORCH .. " KM_LINT_DIR=" .. lints, "tasks lint " .. RELU .. " --cpu --json --no-cache")
    local r2 = json.decode(out).results[1]
    t.eq(r2.machine.code, "NO_PYTORCH") t.eq(#r2.flags, 0)
    local now = files_in(lints)
    t.eq(#now, #files_in(lints))
    for _, p in ipairs(now) do t.eq(testing.read(p), kept[p], p .. " unchanged") end
  end)
else
  t.skip("1. tasks lint with PyTorch", "PyTorch not available (set KM_PYTHON to a python with torch)")
end

----------------------------------------------------------------------------------------
-- 2. compile-only verdicts

local KERNEL = 'extern "C" __global__ void relu(const float *x, float *y, int n) {\n'
  .. '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n}\n'

if NO_GPU then
  t.test("2. without a GPU, launch code calling a kernel the source lacks is launch_error, exit 1", function()
    local cand = testing.candidate_dir(DIR .. "/cand-undefined", { source = KERNEL,
      launch = "return function(k, io, s) k.relu_v2{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n) end\n" })
    local out, err, rc = kmrun("KM_CACHE_DIR=" .. DIR .. "/nv2", "eval " .. RELU .. " " .. cand)
    t.eq(rc, 1, out .. err)
    t.ok(out:find("^launch_error  l1_relu"), out)
    t.ok(out:find("launch.lua calls k.relu_v2, which kernel.cu does not define (its kernels: relu)", 1, true), out)
    -- the helpers (k.cdiv, k.scratch, k.set_shared) are not kernels
    testing.candidate_dir(cand, { source = KERNEL,
      launch = "return function(k, io, s) k.set_shared('relu', 0) k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n) end\n" })
    out, err, rc = kmrun("KM_CACHE_DIR=" .. DIR .. "/nv2", "eval " .. RELU .. " " .. cand)
    t.eq(rc, 3, out .. err)
    t.ok(out:find("^compiled  l1_relu"), out)
  end)

  t.test("2. a compile error exits 1 from kmrun eval and from a strategy run alike", function()
    local task = DIR .. "/broken/l1_relu"
    testing.copy_tree(RELU, task)
    testing.write(task .. "/starter/kernel.cu", KERNEL:gsub("y%[i%] = ", "y[i] = +;"))
    local out, err, rc = kmrun("KM_CACHE_DIR=" .. DIR .. "/nv2", "eval " .. task .. " starter")
    t.eq(rc, 1, out .. err)
    t.ok(out:find("^compile_error  l1_relu"), out)
    out, err, rc = kmrun("KM_CACHE_DIR=" .. DIR .. "/nv2 KM_LINT_DIR=" .. DIR .. "/lint2",
      "implement " .. task .. " --provider offline --store " .. DIR .. "/broken.sqlite")
    t.eq(rc, 1, "as kmrun eval's: " .. out .. err)
    -- a run whose every candidate compiled is still 3
    out, err, rc = kmrun("KM_CACHE_DIR=" .. DIR .. "/nv2 KM_LINT_DIR=" .. DIR .. "/lint2",
      "implement " .. RELU .. " --provider offline --quiet --store " .. DIR .. "/fine.sqlite")
    t.eq(rc, 3, out .. err)
  end)
else
  t.skip("2. compile-only verdicts", "a GPU is present: candidates are judged, not only compiled")
end

t.test("2. docs/cli.md and docs/eval.md give a compile error the same exit status", function()
  local cli, ev = testing.read(ROOT .. "/docs/cli.md"), testing.read(ROOT .. "/docs/eval.md")
  local three = cli:match("3 no GPU here:(.-)4 the model")
  t.ok(three and not three:find("compile_error", 1, true), "exit 3 is not given for compile_error: " .. tostring(three))
  t.ok(cli:find("A compile error is 1 from every command", 1, true), "cli.md")
  t.ok(ev:find("1 not correct (a compile error included)", 1, true) and ev:find("`launch_error` (exit 1)", 1, true), "eval.md")
end)

----------------------------------------------------------------------------------------
-- 3. errors name the user's file

t.test("3. a bad shape expression names the task file, the field and the symbol", function()
  local task = DIR .. "/bad-expr/l1_relu"
  testing.copy_tree(RELU, task)
  local text = testing.read(task .. "/task.lua")
  testing.write(task .. "/task.lua", (text:gsub('outputs = { { name = "y", dtype = "f32", shape = { "n" }',
    'outputs = { { name = "y", dtype = "f32", shape = { "q" }')))
  local out, err, rc = kmrun("", "tasks check " .. task)
  t.eq(rc, 1, out .. err)
  t.ok(err:find("l1_relu/task.lua: outputs[1].shape: at shapes[1]: y: dimension 1: expression 'q': " ..
    "q is not a symbol of the shape set {n=268435456}", 1, true), err)
  t.ok(not err:find("shape.lua", 1, true) and not err:find(": nil", 1, true), err)
end)

t.test("3. --store in a folder that does not exist is an error; nothing is created", function()
  local out, err, rc = kmrun("KM_CACHE_DIR=" .. DIR .. "/nv3", "implement " .. RELU ..
    " --provider offline --store " .. DIR .. "/nowhere/deeper/run.sqlite")
  t.eq(rc, 2, out .. err)
  t.ok(err:find("--store " .. DIR .. "/nowhere/deeper/run.sqlite: no such folder '" .. DIR .. "/nowhere/deeper'", 1, true), err)
  t.eq(sys.readdir(DIR .. "/nowhere"), nil, "no folder made")
end)

t.test("3. a folder of problem files without PyTorch: the error alone, files in numeric order", function()
  local kb = DIR .. "/kb"
  assert(sys.mkdir(kb))
  for _, name in ipairs { "10_c", "2_b", "1_a" } do testing.problem(kb, name, {}) end
  for _, cmd in ipairs { "stats", "dedup", "lint", "check" } do
    local out, err, rc = kmrun(NO_TORCH .. " KM_SPEC_DIR=" .. DIR .. "/spec3", "tasks " .. cmd .. " " .. kb)
    t.eq(rc, 1, cmd .. ": " .. out .. err)
    t.eq(out, "", cmd .. ": nothing but the error: " .. out)
    t.ok(err:find("invalid: 3 KernelBench problem files (1_a.py, 2_b.py, 10_c.py): PyTorch is not importable", 1, true),
      cmd .. ": " .. err)
  end
end)

t.test("3. merge says how many episodes it skipped and why", function()
  local env = "KM_CACHE_DIR=" .. DIR .. "/nv3 KM_LINT_DIR=" .. DIR .. "/lint3"
  for _, s in ipairs { "m1", "m2" } do
    kmrun(env, "implement " .. ROOT .. "/tests/tasks/t_rowsum --provider offline --quiet --store " .. DIR .. "/" .. s .. ".sqlite")
  end
  local out = kmrun("", fmt("merge %s/all.sqlite %s/m1.sqlite", DIR, DIR))
  t.ok(out:find("m1.sqlite: 1 episode(s) added\n", 1, true), out)
  out = kmrun("", fmt("merge %s/all.sqlite %s/m1.sqlite %s/m2.sqlite", DIR, DIR, DIR))
  t.ok(out:find("m1.sqlite: 0 episode(s) added; skipped 1 already in " .. DIR .. "/all.sqlite (the same episodes)", 1, true), out)
  t.ok(out:find("m2.sqlite: 0 episode(s) added; skipped 1 whose task, strategy, model and repeat " .. DIR ..
    "/all.sqlite already has finished", 1, true), out)
end)

----------------------------------------------------------------------------------------
-- 4. help and docs

t.test("4. kmrun --help lists tasks lint and where the caches are, and how to clear them", function()
  local out = kmrun("", "--help")
  t.ok(out:find("tasks      list, check, count, deduplicate and lint a task suite", 1, true), out)
  t.ok(out:find("caches: $XDG_CACHE_HOME/kmrun/ (else ~/.cache/kmrun/)", 1, true), out)
  t.ok(out:find("rm -rf ~/.cache/kmrun/lint", 1, true), out)
  local lint_help = kmrun("", "tasks lint --help")
  t.ok(lint_help:find("$XDG_CACHE_HOME/kmrun/lint", 1, true) and lint_help:find("never a flag and never kept", 1, true), lint_help)
end)

t.test("4. docs/store.md gives the schema version the store writes", function()
  local v = require("km.store").schema_version
  local doc = testing.read(ROOT .. "/docs/store.md")
  t.ok(doc:find(fmt("## Schema (version %d)", v), 1, true), "the heading")
  t.ok(doc:find(fmt("`PRAGMA user_version = %d`", v), 1, true), "the pragma")
  local refused = doc:match("Opening a file whose `user_version` is (.-) fails")
  t.ok(refused and refused:find(tostring(v), 1, true), "the versions it opens: " .. tostring(refused))
end)

t.test("4. a passing test file prints nothing on stderr (make test shows stderr)", function()
  local out, err, rc = testing.run(fmt("cd %s && %s tests/lua/test_bench_smoke.lua", ROOT, KMRUN))
  -- (when it fails, its own run under make test says why)
  if rc ~= 0 then return t.note("tests/lua/test_bench_smoke.lua failed; its stderr is its diagnostics") end
  t.eq(err, "", "unexplained lines under make test: " .. out)
end)

----------------------------------------------------------------------------------------
-- 5. caches of its own

t.test("5. every test file runs with empty caches of its own, removed after it", function()
  local home = os.getenv("HOME") or ""
  local xdg = os.getenv("XDG_CACHE_HOME")
  t.ok(xdg and xdg ~= "" and not xdg:find(home .. "/.cache", 1, true), "XDG_CACHE_HOME: " .. tostring(xdg))
  for _, v in ipairs { "KM_CACHE_DIR", "KM_SPEC_DIR", "KM_BASELINE_DIR", "KM_LINT_DIR", "KM_PRECOMPILE_DIR", "KM_SERVE_SOCKET" } do
    t.eq(os.getenv(v), nil, v)
  end
  t.eq(require("km.nvrtc").cache_dir(), xdg .. "/kmrun/nvrtc")
  t.eq(require("km.jsoncache").dir("lint", "KM_LINT_DIR"), xdg .. "/kmrun/lint")
  t.ok(os.getenv("XDG_RUNTIME_DIR"):find(xdg:match("^(.*)/[^/]+$"), 1, true), "a kmrun serve's socket here too")
  -- two runs of tests/exec: two folders, each gone after its test, the exit status kept
  local probe = DIR .. "/probe.lua"
  testing.write(probe, "print(os.getenv('XDG_CACHE_HOME')) os.exit(5)\n")
  local a, _, rca = testing.run(fmt("env -u XDG_CACHE_HOME KMRUN=%s sh %s/tests/exec %s", KMRUN, ROOT, probe))
  local b = testing.run(fmt("KMRUN=%s sh %s/tests/exec %s", KMRUN, ROOT, probe))
  a, b = a:gsub("%s+$", ""), b:gsub("%s+$", "")
  t.eq(rca, 5, "the test's exit status")
  t.ok(a ~= "" and a ~= b and a ~= xdg, a .. " / " .. b)
  t.eq(sys.readdir(a), nil, "removed after its test")
end)

os.execute("rm -rf '" .. DIR .. "'")
t.done()
