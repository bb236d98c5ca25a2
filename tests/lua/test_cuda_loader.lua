-- km.cuda's loader on a machine without a GPU, against a stand-in libcuda
-- (tests/c/fake_libcuda.c): every failure is a clear reason, never a crash, and every
-- entry point is asked for at the CUDA version of the cuda.h kmrun was built with.
local t = require "km.tap"
local testing = require "km.testing"

local _, KMRUN, BUILD = testing.paths()
local FAKE = BUILD .. "/tests/fake_libcuda.so"
if not io.open(FAKE) then t.skip_all("no " .. FAKE .. " (make test builds it)") end

local function probe(env)
  local p = io.popen(env .. " " .. KMRUN .. [[ -e 'local c = require "km.cuda"; print(c.available())' 2>&1; echo "rc=$?"]])
  local out = p:read("a")
  p:close()
  return out
end

t.test("no driver library: false and the reason", function()
  local out = probe("KM_LIBCUDA=/nonexistent/libcuda.so.1")
  t.ok(out:find("^false\tno CUDA driver: cannot load /nonexistent/libcuda.so.1"), out)
  t.ok(out:find("rc=0", 1, true), out)
end)

t.test("a library without cuGetProcAddress_v2 is too old", function()
  local out = probe("KM_LIBCUDA=" .. BUILD .. "/lib/libcjson.so.1")
  t.ok(out:find("CUDA driver too old", 1, true), out)
end)

t.test("a driver lacking an entry point at this version says which", function()
  local out = probe("KM_LIBCUDA=" .. FAKE .. " FAKE_CUDA_MODE=missing:cuFuncGetParamInfo")
  t.ok(out:find("CUDA driver lacks cuFuncGetParamInfo for CUDA 13.0", 1, true), out)
end)

t.test("cuInit failing and no devices are reasons, not crashes", function()
  local out = probe("KM_LIBCUDA=" .. FAKE .. " FAKE_CUDA_MODE=noinit")
  t.ok(out:find("cuInit failed: CUDA_ERROR_NO_DEVICE", 1, true), out)
  out = probe("KM_LIBCUDA=" .. FAKE .. " FAKE_CUDA_MODE=nodevice")
  t.ok(out:find("no CUDA device", 1, true), out)
  out = probe("KM_LIBCUDA=" .. FAKE .. " KM_DEVICE=3")
  t.ok(out:find("device 3 requested but 1 device(s) visible", 1, true), out)
end)

t.test("every entry point is resolved by its base name at the header's CUDA version", function()
  local log = os.tmpname()
  local out = probe("KM_LIBCUDA=" .. FAKE .. " FAKE_CUDA_LOG=" .. log)
  t.ok(out:find("^true"), out)
  local asked = {}
  for line in io.lines(log) do
    local sym, ver = line:match("^(%S+) (%d+)$")
    asked[sym] = tonumber(ver)
  end
  os.remove(log)
  -- the names cuda.h maps to _v2 (and friends) are asked for by their base name, so the
  -- driver returns the ABI this version's prototype expects
  for _, sym in ipairs { "cuMemAlloc", "cuMemcpyHtoD", "cuDevicePrimaryCtxRelease",
      "cuStreamBeginCapture", "cuEventElapsedTime", "cuDeviceTotalMem", "cuMemGetInfo" } do
    t.eq(asked[sym], 13000, sym)
  end
  -- except the two whose CUDA 13 version takes a context argument that cuda.h's prototype
  -- of that name lacks (cuCtxSynchronize_v2(CUcontext)): asked at the old prototype's 2000,
  -- or a call passes the driver a garbage context (seen on the H200: CONTEXT_IS_DESTROYED,
  -- and a segfault)
  t.eq(asked.cuCtxSynchronize, 2000, "cuCtxSynchronize")
  t.eq(asked.cuCtxGetDevice, 2000, "cuCtxGetDevice")
  for sym in pairs(asked) do t.ok(not sym:match("_v%d$"), "asked for a versioned name: " .. sym) end
end)

t.test("GPU work without a driver raises a clear error", function()
  local p = io.popen("KM_LIBCUDA=/nonexistent " .. KMRUN .. [[ -e 'require("km.buffer").new("f32", 4)' 2>&1]])
  local out = p:read("a")
  p:close()
  t.ok(out:find("CUDA unavailable: no CUDA driver", 1, true), out)
end)

t.done()
