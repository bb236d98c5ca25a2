-- KernelBench problem files as a strategy run's tasks (issue 19, items 6 and 7): without
-- PyTorch the run says so in one line naming the Python tried and KM_PYTHON (not one line
-- per file); offline, where a problem file (no starter) could only end no_code, the run is
-- refused up front with the reason (exit 2, no store written), and a sweep that also has
-- tasks with starters leaves the problem files out, saying so.
local t = require "km.tap"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()

local dir = testing.tmpdir()
for _, name in ipairs { "19_ReLU", "20_ReLU_again", "21_ReLU_thrice" } do
  testing.problem(dir .. "/level1", name, { sizes = "batch_size = 16\ndim = 1024" })
end

-- a torch that cannot be imported, whatever the Python: first on PYTHONPATH
require("km.sys").mkdir(dir .. "/notorch/torch")
testing.write(dir .. "/notorch/torch/__init__.py", 'raise ImportError("no torch here (a test stand-in)")\n')

local function lines_of(text)
  local n = 0
  for _ in text:gmatch("[^\n]+") do n = n + 1 end
  return n
end

t.test("without PyTorch: one line for every problem file, naming the Python and KM_PYTHON", function()
  local cmd = string.format("(cd %s && env -u KM_PYTHON PYTHONPATH=%s/notorch %s implement level1 --provider offline " ..
    "--store %s/a.sqlite 2>&1 >/dev/null)", dir, dir, KMRUN, dir)
  local err, rc = testing.sh(cmd)
  t.eq(rc, 2, err)
  t.eq(lines_of(err), 2, err) -- the problem files' line, then "no valid tasks"
  local line = err:match("^[^\n]*")
  t.ok(line:find("3 KernelBench problem files (19_ReLU.py, 20_ReLU_again.py, 21_ReLU_thrice.py)", 1, true), line)
  t.ok(line:find("PyTorch is not importable by /", 1, true), "names the Python tried: " .. line)
  t.ok(line:find("set KM_PYTHON to a python that has torch", 1, true), line)
  t.ok(err:find("kmrun: no valid tasks", 1, true), err)
  -- with KM_PYTHON set, the line says it was the one tried
  err, rc = testing.sh(string.format("(cd %s && KM_PYTHON=python3 PYTHONPATH=%s/notorch %s sweep --strategies implement " ..
    "level1 --provider offline --store %s/b.sqlite 2>&1 >/dev/null)", dir, dir, KMRUN, dir))
  t.eq(rc, 2, err)
  t.eq(lines_of(err), 2, err)
  t.ok(err:find("point KM_PYTHON (now python3) at a python that has torch", 1, true), err)
end)

t.test("without PyTorch: kmrun tasks list/check/stats/lint say it in one line too", function()
  for _, sub in ipairs { "list", "check", "stats", "lint" } do
    local out, rc = testing.sh(string.format("(cd %s && env -u KM_PYTHON PYTHONPATH=%s/notorch %s tasks %s level1 2>&1)",
      dir, dir, KMRUN, sub))
    t.ok(rc ~= 0, sub .. ": " .. out)
    local n = 0
    for _ in out:gmatch("PyTorch is not importable") do n = n + 1 end
    t.eq(n, 1, sub .. ": " .. out)
    t.ok(out:find("3 KernelBench problem files (19_ReLU.py, 20_ReLU_again.py, 21_ReLU_thrice.py)", 1, true), sub .. ": " .. out)
  end
end)

local okk, why = require("km.task.kernelbench").available()
local offline_test = okk and t.test or function(name) t.skip(name, "PyTorch not available (KM_PYTHON): " .. tostring(why)) end
offline_test("offline over problem files: refused up front with the reason", function()
  local out, rc = testing.sh(string.format("cd %s && %s implement level1/19_ReLU.py --provider offline --store %s/c.sqlite",
    dir, KMRUN, dir))
  t.eq(rc, 2, out)
  t.ok(out:find("kmrun: offline (no model configured", 1, true), out)
  t.ok(out:find("1 task has no starter to stand in for a model's candidate (19_ReLU): every episode could only end no_code", 1, true), out)
  t.ok(not io.open(dir .. "/c.sqlite"), "no store written")
  -- a sweep with a task that has a starter runs that one and names the problem files left out
  out, rc = testing.sh(string.format("cd %s && %s sweep --strategies implement level1 %s/tests/tasks/t_rowsum --filter '^[t12]' " ..
    "--provider offline --seeds 1 --store %s/d.sqlite --worker-stderr null", dir, KMRUN, ROOT, dir))
  t.ok(rc == 3 or rc == 0 or rc == 1, out)
  t.ok(out:find("3 tasks have no starter to stand in for a model's candidate (19_ReLU, 20_ReLU_again, 21_ReLU_thrice): " ..
    "they are left out", 1, true), out)
  t.ok(not out:find("19_ReLU%s+implement"), "no episode for a problem file: " .. out)
  t.ok(out:find("\nt_rowsum%s+implement"), out)
end)

os.execute("rm -rf " .. dir)
t.done()
