-- km.serve.sanitize without a GPU: finding compute-sanitizer (or saying clearly that it is
-- missing), the argv a worker runs under, and reading real compute-sanitizer logs (captured
-- on an H200, driver 580) into statuses, with findings in other kernels kept apart.
local t = require "km.tap"
local sanitize = require "km.serve.sanitize"

-- racecheck on a block reduction missing its __syncthreads (kernel "racy")
local RACE_LOG = [==[
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at racy+0x980 in kernel.cu:6
=========     and Read access at racy+0x910 in kernel.cu:8 [32768 hazards]
=========     and Read access at racy+0x920 in kernel.cu:8 [12288 hazards]
=========     and Read access at racy+0x930 in kernel.cu:8 [7552 hazards]
=========     and Read access at racy+0x940 in kernel.cu:8 [4096 hazards]
=========     and Read access at racy+0x950 in kernel.cu:8 [2048 hazards]
=========     and Read access at racy+0x960 in kernel.cu:8 [1024 hazards]
=========     and Read access at racy+0x970 in kernel.cu:8 [512 hazards]
========= 
========= Error: Race reported between Write access at racy+0x9a0 in kernel.cu:8
=========     and Read access at racy+0x920 in kernel.cu:8 [9216 hazards]
=========     and Read access at racy+0x930 in kernel.cu:8 [3200 hazards]
========= 
========= Error: Race reported between Read access at racy+0x930 in kernel.cu:8
=========     and Write access at racy+0x9d0 in kernel.cu:8 [640 hazards]
========= 
========= Warning: Race reported between Write access at racy+0xa70 in kernel.cu:8
=========     and Read access at racy+0xa90 in kernel.cu:8 [256 hazards]
========= 
========= RACECHECK SUMMARY: 4 hazards displayed (3 errors, 1 warning)
]==]
-- memcheck --padding on a kernel reading one element past a 16 KiB input (kernel "oob")
local OOB_LOG = [==[
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at oob+0x110 in kernel.cu:14
=========     by thread (255,0,0) in block (15,0,0)
=========     Access to 0x7fbe70c04000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7fbe70c00000 of size 16,384 bytes
========= 
========= ERROR SUMMARY: 1 error
]==]

t.test("parse: racecheck's hazards are races in the named kernel", function()
  local p = sanitize.parse(RACE_LOG, sanitize.kernel_names('extern "C" __global__ void racy(const float *x) {}'))
  t.eq(#p.findings, 4)
  for _, f in ipairs(p.findings) do
    t.eq(f.kind, "race")
    t.eq(f.candidate, true)
  end
  t.ok(p.findings[1].text:find("^Error: Race reported between Write access at racy%+0x980 in kernel%.cu:6\n    and Read access"), p.findings[1].text)
  t.eq(p.summary, "RACECHECK SUMMARY: 4 hazards displayed (3 errors, 1 warning)")
  local r = sanitize.record("racecheck", p)
  t.eq(r.status, "race")
  t.eq(r.candidate_findings, 4)
  t.ok(#r.text <= sanitize.SHOWN and r.text:find("kernel.cu:8", 1, true), r.text)
end)

t.test("parse: memcheck's invalid read is out_of_bounds; other kernels are not the candidate's", function()
  local p = sanitize.parse(OOB_LOG, sanitize.kernel_names('extern "C" __global__ void oob(float *y) {}'))
  t.eq(#p.findings, 1)
  t.eq(p.findings[1].kind, "out_of_bounds")
  t.eq(p.findings[1].candidate, true)
  t.ok(p.findings[1].text:find("1 bytes after the nearest allocation", 1, true), p.findings[1].text)
  t.eq(p.summary, "ERROR SUMMARY: 1 error")
  local r = sanitize.record("memcheck", p)
  t.eq(r.status, "out_of_bounds")
  -- the same finding in a kernel the candidate did not write decides nothing
  local q = sanitize.parse(OOB_LOG, sanitize.kernel_names('extern "C" __global__ void oob_fast(float *y) {}'))
  t.eq(q.findings[1].candidate, false)
  local r2 = sanitize.record("memcheck", q)
  t.eq(r2.status, nil)
  t.eq(r2.findings, 1)
  t.eq(r2.candidate_findings, 0)
  t.ok(r2.other:find("Invalid __global__ read", 1, true))
  -- a racecheck finding in a memcheck run is not memcheck's status
  t.eq(sanitize.record("memcheck", sanitize.parse(RACE_LOG, { racy = true })).status, nil)
end)

t.test("kernel_names: every __global__ function, templates and attributes aside", function()
  local names = sanitize.kernel_names([[
extern "C" __global__ void __launch_bounds__(256) rowsum(const float *x, float *y, int n) {}
extern "C" __global__
void second_one (int a) {}
__device__ float helper(float x) { return x; }
]])
  t.ok(names.rowsum and names.second_one and not names.helper and not names.__launch_bounds__, "names")
end)

t.test("apply: the first tool with findings sets the status and leads the feedback", function()
  local races = sanitize.record("racecheck", sanitize.parse(RACE_LOG, { racy = true }))
  local clean = sanitize.record("memcheck", sanitize.parse("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n", { racy = true }))
  local v = sanitize.apply({ status = "mismatch", feedback = "'y' differs from the reference" }, { clean, races })
  t.eq(v.status, "race")
  t.eq(v.sanitizer.previous_status, "mismatch")
  t.ok(v.feedback:find("^compute%-sanitizer racecheck found shared%-memory races in your kernel %(4 findings%)"), v.feedback)
  t.ok(v.feedback:find("also said (mismatch): 'y' differs", 1, true), v.feedback)
  local c = sanitize.apply({ status = "correct", feedback = "Correct." }, { clean, sanitize.record("racecheck", sanitize.parse("", {})) })
  t.eq(c.status, "correct")
  t.ok(c.feedback:find("found no problem", 1, true), c.feedback)
  local o = sanitize.apply({ status = "crashed", feedback = "CUDA_ERROR_LAUNCH_FAILED" },
    { sanitize.record("memcheck", sanitize.parse(OOB_LOG, { oob = true })) })
  t.eq(o.status, "out_of_bounds")
  t.ok(not o.feedback:find("LAUNCH_FAILED", 1, true), "the crash memcheck caused is not shown: " .. o.feedback)
end)

t.test("argv: the tool, a log file, a print limit, padding for memcheck", function()
  local a = table.concat(sanitize.argv("/x/compute-sanitizer", "memcheck", "/tmp/log"), " ")
  t.eq(a, "/x/compute-sanitizer --tool memcheck --log-file /tmp/log --print-limit 20 --error-exitcode 99 --report-api-errors no --show-backtrace device --padding 1024")
  t.ok(not table.concat(sanitize.argv("cs", "racecheck", "l"), " "):find("padding", 1, true))
end)

t.test("find: PATH first, then $CUDA_HOME/bin; a clear reason when there is none", function()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir .. "/bin")
  local f = assert(io.open(dir .. "/bin/compute-sanitizer", "w")); f:write("#!/bin/sh\n"); f:close()
  local env = { PATH = "/nonexistent:" .. dir .. "/bin", CUDA_HOME = "/nowhere" }
  t.eq(sanitize.find { getenv = function(k) return env[k] end }, dir .. "/bin/compute-sanitizer")
  env = { PATH = "/nonexistent", CUDA_HOME = dir }
  t.eq(sanitize.find { getenv = function(k) return env[k] end }, dir .. "/bin/compute-sanitizer")
  t.eq(sanitize.find { sanitizer = dir .. "/bin/compute-sanitizer" }, dir .. "/bin/compute-sanitizer")
  local p, why, code = sanitize.find { sanitizer = dir .. "/nope" }
  t.ok(p == nil and why:find("not found at", 1, true) and code == "NO_SANITIZER", why)
  os.execute("rm -rf " .. dir)
  if io.open("/usr/local/cuda/bin/compute-sanitizer") then return end -- the fallback exists here
  env = { PATH = "/nonexistent", CUDA_HOME = "/nowhere" }
  p, why, code = sanitize.find { getenv = function(k) return env[k] end }
  t.ok(p == nil and code == "NO_SANITIZER", tostring(p))
  t.ok(why:find("compute-sanitizer not found on PATH, in $CUDA_HOME/bin (/nowhere)", 1, true), why)
end)

t.test("kmrun eval --sanitize without compute-sanitizer: the reason, exit status 2", function()
  if io.open("/usr/local/cuda/bin/compute-sanitizer") then return t.note("compute-sanitizer is installed here") end
  local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
  local root = arg[0]:match("^(.*)/tests/lua/") or "."
  local p = io.popen("PATH=/nonexistent CUDA_HOME=/nowhere " .. KMRUN .. " eval " .. root ..
    "/tests/tasks/t_rowsum starter --sanitize 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("kmrun eval --sanitize: compute-sanitizer not found on PATH", 1, true), out)
  t.ok(out:find("rc=2", 1, true), out)
end)

t.done()
