-- GPU: whether a kernel can read this process's ordinary host memory (HMM or ATS), and that
-- km.cuda.device().pageable_memory_access says so. Where it can, a kernel that knows a host
-- address reads (and writes) the worker's heap: docs/security.md, "What this does not
-- cover". The judge keeps no draw to come there (tests/lua/test_judge_random.lua). The last
-- test of its own file: where the read faults, the context is lost.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local sys = require "km.sys"

local PEEK = [[
extern "C" __global__ void peek(unsigned char *out, unsigned long long addr, int n) {
  const unsigned char *p = (const unsigned char *)addr;
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = p[i];
}
]]

t.test("a kernel given a Lua string's host address reads it exactly where pageable_memory_access says", function()
  local d = cuda.device()
  t.note("pageable_memory_access = " .. tostring(d.pageable_memory_access))
  t.ok(d.pageable_memory_access == 0 or d.pageable_memory_access == 1, "an answer: 0 or 1")
  local secret = "kmrun host heap probe " .. string.rep("-", 40) .. " " .. sys.random(1 << 40)
  local addr = math.tointeger(tonumber(string.format("%p", secret)))
  t.ok(addr and addr > 0, "the string's address")
  local prog = assert(nvrtc.compile(PEEK))
  local fn = assert(assert(cuda.load(prog)):get("peek"))
  local out = buffer.new("u8", 160):fill(0)
  local ok = fn:launch({ grid = 1, block = 32 }, out, addr, 160)
  local synced, msg = cuda.synchronize()
  if d.pageable_memory_access == 1 then
    t.ok(ok and synced, "the read ran: " .. tostring(msg))
    local bytes = {}
    for i, v in ipairs(out:to_table()) do bytes[i] = string.char(v) end
    t.ok(table.concat(bytes):find(secret, 1, true), "the kernel read the host string's bytes")
  else
    t.ok(not (ok and synced), "the read faulted")
    t.note("the read: " .. tostring(msg))
  end
end)

t.done()
