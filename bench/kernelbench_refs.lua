-- bench/kernelbench_refs.lua — every KernelBench problem file under the folders given loads
-- as a kmrun task and runs its PyTorch reference on this GPU, through the judge's own path
-- (problem loaded in this process on kmrun's context, inputs from get_inputs() under a seed
-- made on the GPU, parameters written out, forward on kmrun's stream into kmrun buffers).
--
--   build/kmrun bench/kernelbench_refs.lua [--precision fp32] [--max-s S] DIR...
--
-- Prints one line per problem (ok / FAIL with the reason, seconds) and a summary. Problem
-- files are read from a KernelBench checkout (never copied into this repository).
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local judge_mod = require "km.judge"
local task = require "km.task"
local timing = require "km.timing"
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/kernelbench_refs.lua", synopsis = "[options] DIR...",
  about = "Every KernelBench problem file under the folders given runs its PyTorch reference on this GPU.",
  positional = { { "dirs", "DIR", "folders of problem files", required = true, many = true } },
  options = {
    { "precision", "P", "fp32, fp16 or bf16", default = "fp32" },
    { "max-s", "S", "start no problem after S seconds", type = "seconds" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local dirs, precision, max_s = a.dirs, a.precision, a.max_s or math.huge
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/kernelbench_refs.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local files = {}
for _, d in ipairs(dirs) do
  local p = io.popen("ls -1 '" .. d .. "'/*.py 2>/dev/null | sort -V")
  for f in p:lines() do files[#files + 1] = f end
  p:close()
end

local judge = assert(judge_mod.new())
print(("device %s, %d problem files, precision %s, %s"):format(judge.device.name, #files, precision, os.date("!%Y-%m-%d")))
local t0 = timing.wall()
local ok_n, fail, done = 0, {}, 0
for _, f in ipairs(files) do
  if timing.wall() - t0 > max_s then break end
  local w0 = timing.wall()
  local why
  local key = require("km.task.kbtask").key(f, precision)
  local t, err = task.load(key)
  if not t then why = err
  else
    local lost
    why, lost = judge:try_reference(t, 1)
    if lost then print("FAIL " .. f .. ": " .. why) break end
  end
  done = done + 1
  local s = timing.wall() - w0
  if why then
    fail[#fail + 1] = f
    print(("FAIL %-60s %6.2f s  %s"):format(f, s, tostring(why):gsub("\n", " | "):sub(1, 400)))
  else
    ok_n = ok_n + 1
    print(("ok   %-60s %6.2f s"):format(f, s))
  end
end
print(("summary: %d of %d run (%d files), %d ok, %d failed, %.1f s"):format(done, #files, #files, ok_n, #fail, timing.wall() - t0))
return #fail == 0 and 0 or 1
