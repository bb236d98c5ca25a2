-- docs/tasks.md's worked KernelBench candidate (issue 19, item 10) is real: its 19_ReLU
-- problem file, kernel.cu and launch.lua, taken from the doc as written, pass `kmrun eval`
-- — compiled without a GPU (exit 3), correct with one (exit 0) — and the doc says that `s`
-- holds only a problem file's scalar inputs.
local t = require "km.tap"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()

local doc = assert(testing.read(ROOT .. "/docs/tasks.md"))
local section = doc:match("\n## A worked KernelBench candidate: 19_ReLU\n(.-)\n## ") or
  doc:match("\n## A worked KernelBench candidate: 19_ReLU\n(.*)$")

t.test("the section is there, with a problem file, kernel.cu and launch.lua", function()
  t.ok(section, "docs/tasks.md has the section")
  section = section or ""
  t.ok(section:find("```python\n.-class Model%(nn%.Module%)"), "the problem file")
  t.ok(section:find("```cuda\n.-__global__ void relu"), "kernel.cu")
  t.ok(section:find("```lua\nreturn function%(k, io, s%)"), "launch.lua")
  t.ok(section:find("`s` for a problem file holds only its scalar inputs", 1, true), "says what s holds")
end)

-- README's "KernelBench in five minutes": where the problems come from, the torch venv and
-- KM_PYTHON, the worked 19_ReLU with the candidate shown (the same two files as above, so the
-- test below judges README's too), then a strategy over a folder of problem files.
t.test("README's KernelBench in five minutes: clone, venv and KM_PYTHON, the worked 19_ReLU, a strategy", function()
  local readme = assert(testing.read(ROOT .. "/README.md"))
  local five = readme:match("\n## KernelBench in five minutes\n(.-)\n## ") or ""
  t.ok(five ~= "", "README has the section")
  t.ok(five:find("git clone --depth 1 https://github.com/ScalingIntelligence/KernelBench kb", 1, true), "where the problems come from")
  t.ok(five:find("python3 -m venv ", 1, true) and five:find("pip install torch", 1, true), "a torch venv")
  t.ok(five:find("export KM_PYTHON=", 1, true), "KM_PYTHON")
  t.ok(five:find("build/kmrun eval kb/KernelBench/level1/19_ReLU.py relu/", 1, true), "the worked eval")
  t.eq(five:match("```cuda\n(.-)```"), (section or ""):match("```cuda\n(.-)```"), "README's kernel.cu is docs/tasks.md's")
  t.eq(five:match("```lua\n(.-)```"), (section or ""):match("```lua\n(.-)```"), "README's launch.lua is docs/tasks.md's")
  local strategy = five:match("build/kmrun (%S+) kb/KernelBench/level1/ ")
  t.ok(strategy and io.open(ROOT .. "/strategies/" .. strategy .. ".lua"), "a strategy over the folder: " .. tostring(strategy))
  local _, _, rc = testing.run(KMRUN .. " " .. strategy .. " --help")
  t.eq(rc, 0, "the strategy answers --help")
end)

local okk, why = require("km.task.kernelbench").available()
local with_torch = okk and t.test or function(name) t.skip(name, "PyTorch not available (KM_PYTHON): " .. tostring(why)) end
with_torch("kmrun eval judges it: compiled without a GPU (exit 3), correct with one (exit 0)", function()
  local dir = testing.tmpdir()
  testing.write(dir .. "/19_ReLU.py", assert(section:match("```python\n(.-)```")))
  os.execute("mkdir -p " .. dir .. "/cand")
  testing.write(dir .. "/cand/kernel.cu", assert(section:match("```cuda\n(.-)```")))
  testing.write(dir .. "/cand/launch.lua", assert(section:match("```lua\n(.-)```")))
  local out, rc = testing.sh(string.format("cd %s && %s eval 19_ReLU.py cand/ --seeds 1", dir, KMRUN))
  t.ok(rc == 0 or rc == 3, out)
  if rc == 3 then t.ok(out:find("compiled", 1, true), out)
  else t.ok(out:find("correct", 1, true), out) end
  -- a kernel that does not compile is told apart (exit 1)
  testing.write(dir .. "/cand/kernel.cu", section:match("```cuda\n(.-)```"):gsub("long long n%)", "long long n"))
  out, rc = testing.sh(string.format("cd %s && %s eval 19_ReLU.py cand/ --seeds 1", dir, KMRUN))
  t.eq(rc, 1, out)
  os.execute("rm -rf " .. dir)
end)

t.done()
