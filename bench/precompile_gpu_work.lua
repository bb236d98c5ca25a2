-- bench/precompile_gpu_work.lua — whether km.task.precompile runs anything on the GPU: each
-- problem file (a KernelBench problem, a task's reference.py) is precompiled as the pool's
-- precompiler does it (kb_bridge.precompile, mode default), under torch.profiler with CUDA
-- activity (CUPTI), in one Python process with an empty inductor cache, after the
-- precompiler's warm-up (its first compile, whose GPU work is reported apart). Per problem: compiled
-- ahead, refused (inductor would have run work on the GPU: left to the judge) or not compiled,
-- and the kernels, copies and fills CUPTI saw while it ran — which must be none, whatever the
-- outcome.
--
--   build/kmrun bench/precompile_gpu_work.lua PATH... [--precision P] [--json] [--out F.md]
--
-- PATH: a problem file, or a folder searched for *.py (a task folder's reference.py too).
-- Exit status: 0, 1 when CUPTI saw GPU work during a precompile, 2 on usage errors, 3 where
-- there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")
local json = require "km.json"
local sys = require "km.sys"

local SPEC = A.spec {
  name = "bench/precompile_gpu_work.lua", synopsis = "PATH... [options]",
  about = "Precompiles problem files under CUPTI: what km.task.precompile leaves to the judge, and any GPU work it ran (none expected).",
  positional = { { "paths", "PATH", "problem files, or folders searched for *.py", many = true } },
  options = {
    { "precision", "P", "fp32 (default), fp16 or bf16", type = "choice", choices = { "fp32", "fp16", "bf16" }, default = "fp32" },
    { "json", nil, "also a JSON line per problem", type = "flag" },
    { "out", "FILE", "the summary, in Markdown, also here" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
if not a.paths or #a.paths == 0 then io.stderr:write("bench/precompile_gpu_work.lua: a PATH expected (--help)\n") return EXIT.USAGE end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/precompile_gpu_work.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local ROOT = arg[0]:match("^(.*)/bench/") or "."
local files = {}
local function walk(p)
  local list = sys.readdir(p)
  if not list then
    if p:match("%.py$") then files[#files + 1] = p end -- a file (a problem's tag #fp16 is --precision)
    return
  end
  for _, n in ipairs(list) do walk(p .. "/" .. n) end
end
for _, p in ipairs(a.paths) do walk((p:gsub("/+$", ""))) end
table.sort(files)

local tmp = os.tmpname()
os.remove(tmp)
assert(sys.mkdir(tmp))
local probe = tmp .. "/probe.py"
local f = assert(io.open(probe, "w"))
f:write([[
import json, sys
sys.path.insert(0, sys.argv[1])
import kb_bridge as kb
import torch
from torch.profiler import profile, ProfilerActivity
precision = sys.argv[2]
# the precompiler's first compile, as it starts (torch's one-time set-up): reported apart
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    w = kb.precompile_warm_up("cuda:0")
gpu = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(json.dumps({"warm_up": True, "ok": "error" not in w, "why": w.get("error", ""), "gpu": len(gpu),
                  "names": sorted(set(gpu))[:5]}), flush=True)
for path in sys.argv[3:]:
    r = kb.load(path, precision, "meta", 42, False, None)
    if "error" in r:
        print(json.dumps({"path": path, "ok": False, "code": r.get("code"), "why": r["error"][:300], "gpu": 0}), flush=True)
        continue
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        res = kb.precompile(r["id"], "default", "cuda:0")
    gpu = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kb.release(r["id"])
    print(json.dumps({"path": path, "ok": "error" not in res, "code": res.get("code"), "why": res.get("error", "")[:300],
                      "seconds": res.get("seconds"), "gpu": len(gpu), "names": gpu[:5]}), flush=True)
]])
f:close()
local dev = require("km.cuda").device()
local py = os.getenv("KM_PYTHON") or "python3"
local list = {}
for i, p in ipairs(files) do list[i] = "'" .. p:gsub("'", "'\\''") .. "'" end
local cmd = ("TORCHINDUCTOR_CACHE_DIR=%s/inductor CUDA_VISIBLE_DEVICES=%d %s %s %s/lua/km/task %s %s 2>%s/stderr.txt")
  :format(tmp, dev.index or 0, py, probe, ROOT, a.precision, table.concat(list, " "), tmp)
local p = assert(io.popen(cmd))
local rows, warm = {}, nil
for line in p:lines() do
  local r = json.decode(line)
  if type(r) == "table" and r.warm_up then warm = r if a.json then print(line) end end
  if type(r) == "table" and r.path then
    rows[#rows + 1] = r
    if a.json then print(line) end
  end
end
p:close()

local say, save = B.report(a.out)
local n = { ok = 0, refused = 0, other = 0, gpu = 0, seconds = 0 }
local refused, other, gpu = {}, {}, {}
local function short(path) return path:match("[^/]+/[^/]+$") or path end
for _, r in ipairs(rows) do
  if r.ok then n.ok, n.seconds = n.ok + 1, n.seconds + (tonumber(r.seconds) or 0)
  elseif r.code == "GPU_WORK" then n.refused = n.refused + 1 refused[#refused + 1] = short(r.path)
  else n.other = n.other + 1 other[#other + 1] = short(r.path) .. " (" .. tostring(r.code) .. ")" end
  if (tonumber(r.gpu) or 0) > 0 then
    n.gpu = n.gpu + 1
    gpu[#gpu + 1] = ("%s: %d (%s)"):format(short(r.path), r.gpu, table.concat(r.names or {}, "; "))
  end
end
say("# km.task.precompile under CUPTI: %s, torch in %s, %s", dev.name, py, os.date("!%Y-%m-%d %H:%M UTC"))
say("")
say("| problems | compiled ahead | refused (GPU work) | not compiled (other) | with GPU work seen | compile seconds (ahead) |")
say("| --- | --- | --- | --- | --- | --- |")
say("| %d | %d | %d | %d | %d | %.1f |", #rows, n.ok, n.refused, n.other, n.gpu, n.seconds)
say("")
if warm then
  say("The precompiler's first compile (a one-line function, as it starts: torch's one-time set-up): %s; GPU work seen: %d (%s)",
    warm.ok and "compiled" or ("failed: " .. tostring(warm.why)), warm.gpu or 0, table.concat(warm.names or {}, "; "))
end
if #refused > 0 then say("Refused: %s", table.concat(refused, ", ")) end
if #other > 0 then say("Not compiled: %s", table.concat(other, ", ")) end
if #gpu > 0 then say("GPU work seen: %s", table.concat(gpu, "; ")) end
if #rows < #files then
  local e = io.open(tmp .. "/stderr.txt")
  say("Only %d of %d problems reported; the probe's stderr ends: %s", #rows, #files, e and e:read("a"):sub(-1500) or "?")
  if e then e:close() end
end
save()
sys.rmtree(tmp)
if n.gpu > 0 or #rows < #files then return 1 end
return EXIT.OK
