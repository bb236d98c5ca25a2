-- km.nvrtc: compile to cubin/PTX, the on-disk cache (hits, keys, corruption, unwritable
-- folders), compile_many on threads, km.serve.pool's cache warming (eval.warm, and a pool of
-- fake workers), kernel signature parsing, and misuse. Needs the CUDA toolkit, not a GPU.
local t = require "km.tap"
local nvrtc = require "km.nvrtc"

local testing = require "km.testing"

-- ---- helpers -------------------------------------------------------------------------

local _, KMRUN = testing.paths()
local sh, tmpdir, read, write = testing.sh, testing.tmpdir, testing.read, testing.write

-- Every test compiles into this fresh folder, never into the user's real cache.
local CACHE = tmpdir()
nvrtc.set_cache_dir(CACHE)

local function entry_path(key) return CACHE .. "/" .. key:sub(1, 2) .. "/" .. key end

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

-- A kernel of about fifty lines, so hashing and reading the entry cost what they will.
local BIG = [[
#include <cuda_fp16.h>
// A fused bias + GELU + residual over rows, one block per row.
#ifndef BLOCK
#define BLOCK 256
#endif

__device__ __forceinline__ float gelu(float x) {
  const float c = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

__device__ float block_sum(float v) {
  __shared__ float buf[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = lane < (blockDim.x >> 5) ? buf[lane] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
fused(const float *__restrict__ x, const float *__restrict__ bias,
      const __half *__restrict__ residual, float *__restrict__ y,
      int rows, int cols, float scale) {
  int row = blockIdx.x;
  if (row >= rows) return;
  const float *xr = x + (size_t)row * cols;
  float *yr = y + (size_t)row * cols;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = gelu(xr[c] + bias[c]) * scale;
    v += __half2float(residual[(size_t)row * cols + c]);
    yr[c] = v;
    acc += v;
  }
  float total = block_sum(acc);
  if (threadIdx.x == 0 && total != total) yr[0] = 0.0f; // keep the sum alive
}

extern "C" __global__ void fill(float *y, float v, unsigned long long n) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
]]

local SIMPLE = [[
extern "C" __global__ void add(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}
]]

local function same(a, b, path)
  path = path or "value"
  if type(a) ~= type(b) then error(path .. ": " .. type(a) .. " vs " .. type(b), 0) end
  if type(a) ~= "table" then
    if a ~= b then error(path .. ": " .. tostring(a) .. " vs " .. tostring(b), 0) end
    return true
  end
  for k, v in pairs(a) do same(v, b[k], path .. "." .. tostring(k)) end
  for k in pairs(b) do
    if a[k] == nil then error(path .. "." .. tostring(k) .. " missing", 0) end
  end
  return true
end

-- ---- basics --------------------------------------------------------------------------

t.test("version names NVRTC's major.minor", function()
  local v = nvrtc.version()
  t.ok(v:match("^%d+%.%d+$"), v)
  t.ok(tonumber(v:match("^%d+")) >= 12, v)
end)

t.test("compile returns a cubin, the log and the kernels", function()
  local r, err, code = nvrtc.compile(SIMPLE, { arch = "sm_90" })
  t.ok(r, err)
  t.eq(code, nil)
  t.eq(type(r.cubin), "string")
  t.ok(#r.cubin > 100, "cubin size " .. #r.cubin)
  t.eq(r.cubin:sub(1, 4), "\127ELF")
  t.eq(r.ptx, nil)
  t.eq(type(r.log), "string")
  t.eq(r.arch, "sm_90")
  t.eq(r.name, "kernel.cu")
  t.ok(r.key:match("^%x+$") and #r.key == 64, r.key)
  t.eq(type(r.cached), "boolean")
  t.eq(type(r.ms), "number")
  t.eq(getmetatable(r), nil, "a plain table")
  t.eq(r.kernels.add.name, "add")
  t.eq(#r.kernels.add.params, 3)
end)

t.test("ptx on request contains the entry; compute_* gives PTX only", function()
  local r = assert(nvrtc.compile(SIMPLE, { arch = "sm_90", ptx = true }))
  t.ok(r.cubin and r.cubin:sub(1, 4) == "\127ELF")
  t.ok(r.ptx:find(".entry add", 1, true), r.ptx)
  local v = assert(nvrtc.compile(SIMPLE, { arch = "compute_90" }))
  t.eq(v.cubin, nil)
  t.ok(v.ptx:find(".entry add", 1, true))
  t.ok(v.ptx:find(".target sm_90", 1, true))
  t.eq(v.arch, "compute_90")
end)

t.test("the default arch is the GPU's, or sm_90 without one", function()
  local r = assert(nvrtc.compile(SIMPLE))
  t.ok(r.arch:match("^sm_%d+$"), r.arch)
  local cuda_ok, cuda = pcall(require, "km.cuda")
  if not (cuda_ok and cuda.available and cuda.available()) then t.eq(r.arch, "sm_90") end
end)

t.test("a syntax error returns nil, the log with the line, NVRTC_ERROR_COMPILATION", function()
  local src = "extern \"C\" __global__ void k(float *y) {\n  y[0] = 1.0f;\n  y[1] = ;\n}\n"
  local r, log, code = nvrtc.compile(src, { name = "broken.cu" })
  t.eq(r, nil)
  t.eq(code, "NVRTC_ERROR_COMPILATION")
  t.ok(log:find("broken.cu(3)", 1, true), log)
  t.ok(log:find("error", 1, true), log)
  -- failures are not cached: the same source fails the same way again
  local r2, log2 = nvrtc.compile(src, { name = "broken.cu" })
  t.eq(r2, nil)
  t.eq(log2, log)
end)

t.test("other NVRTC failures say NVRTC_ERROR_X: message", function()
  local r, msg, code = nvrtc.compile(SIMPLE, { options = { "--no-such-option" } })
  t.eq(r, nil)
  t.eq(code, "NVRTC_ERROR_INVALID_OPTION")
  t.ok(msg:find("^NVRTC_ERROR_INVALID_OPTION: "), msg)
  local r2, msg2, code2 = nvrtc.compile(SIMPLE, { arch = "sm_20" }) -- well-formed, unsupported
  t.eq(r2, nil)
  t.eq(code2, "NVRTC_ERROR_INVALID_OPTION")
  t.ok(msg2:find("arch", 1, true), msg2)
end)

t.test("extra options reach NVRTC", function()
  local src = "extern \"C\" __global__ void k(float *y) { y[0] = VIA_OPTIONS; }\n"
  t.eq((nvrtc.compile(src)), nil)
  local r, log = nvrtc.compile(src, { options = { "-DVIA_OPTIONS=1", "-lineinfo", "-use_fast_math" } })
  t.ok(r, log)
end)

t.test("defines: a value, true for a bare -D, false for undefined", function()
  local src = "extern \"C\" __global__ void k(float *y) { y[0] = WIDTH + (FLAG_ON ? 1 : 0); }\n" ..
              "#ifndef FLAG_ON\n#error FLAG_ON must be defined\n#endif\n" ..
              "#ifdef NOT_THIS\n#error NOT_THIS must not be defined\n#endif\n"
  local r, log = nvrtc.compile(src)
  t.eq(r, nil)
  t.ok(log:find("FLAG_ON", 1, true), log)
  r, log = nvrtc.compile(src, { defines = { WIDTH = 4, FLAG_ON = true, NOT_THIS = false } })
  t.ok(r, log)
  r, log = nvrtc.compile(src, { defines = { WIDTH = "(2*2)", FLAG_ON = 1 } })
  t.ok(r, log)
  r, log = nvrtc.compile(src, { defines = { FLAG_ON = true } }) -- WIDTH missing
  t.eq(r, nil)
  t.ok(log:find("WIDTH", 1, true), log)
end)

t.test("headers are found by #include", function()
  local src = "#include \"tile.h\"\n#include \"sub/more.h\"\n" ..
              "extern \"C\" __global__ void k(float *y) { y[0] = twice(TILE) + MORE; }\n"
  local r, log = nvrtc.compile(src)
  t.eq(r, nil)
  t.ok(log:find("tile.h", 1, true), log)
  r, log = nvrtc.compile(src, { headers = {
    ["tile.h"] = "#pragma once\n#define TILE 16\n__device__ inline float twice(float v) { return 2 * v; }\n",
    ["sub/more.h"] = "#define MORE 1\n",
  } })
  t.ok(r, log)
end)

t.test("toolkit headers (cuda_fp16.h, cuda_bf16.h) are on the include path", function()
  local src = [[
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void cvt(const __half *a, __nv_bfloat16 *b, int n) {
  int i = threadIdx.x;
  if (i < n) b[i] = __float2bfloat16(__half2float(a[i]));
}]]
  local r, log = nvrtc.compile(src)
  t.ok(r, log)
  t.eq(r.kernels.cvt.params[1].kind, "ptr")
  t.eq(r.kernels.cvt.params[1].type, "const __half *")
end)

-- ---- the cache -----------------------------------------------------------------------

t.test("a second compile is a cache hit with the same bytes, and fast", function()
  local first = assert(nvrtc.compile(BIG, { ptx = true }))
  t.eq(first.cached, false)
  t.ok(read(entry_path(first.key)), "entry written at <dir>/<key[1:2]>/<key>")
  local wall, inside = {}, {}
  local hit
  for i = 1, 15 do
    local c0 = os.clock()
    hit = assert(nvrtc.compile(BIG, { ptx = true }))
    wall[i] = (os.clock() - c0) * 1e3
    inside[i] = hit.ms
    t.eq(hit.cached, true)
  end
  t.eq(hit.cubin, first.cubin)
  t.eq(hit.ptx, first.ptx)
  t.eq(hit.log, first.log)
  t.eq(hit.key, first.key)
  same(hit.kernels, first.kernels, "kernels")
  local mw, mi = median(wall), median(inside)
  t.note(string.format("cold compile %.1f ms; cache hit median %.3f ms (call, CPU) / %.3f ms (core, wall); cubin %d bytes",
    first.ms, mw, mi, #first.cubin))
  t.ok(mi < 5, "hit takes " .. mi .. " ms")
  t.ok(mw < 5, "hit call takes " .. mw .. " ms")
end)

t.test("key() matches compile's key and changes with every input", function()
  local base = { arch = "sm_90", defines = { A = 1 }, options = { "-lineinfo" } }
  local k = nvrtc.key(SIMPLE, base)
  t.eq(k, nvrtc.compile(SIMPLE, base).key)
  t.eq(k, nvrtc.key(SIMPLE, { options = { "-lineinfo" }, defines = { A = 1 }, arch = "sm_90" }))
  local variants = {
    { arch = "sm_80", defines = { A = 1 }, options = { "-lineinfo" } },
    { arch = "sm_90a", defines = { A = 1 }, options = { "-lineinfo" } },
    { arch = "sm_90", defines = { A = 2 }, options = { "-lineinfo" } },
    { arch = "sm_90", defines = { A = true }, options = { "-lineinfo" } },
    { arch = "sm_90", defines = { A = 1, B = 1 }, options = { "-lineinfo" } },
    { arch = "sm_90", defines = { A = 1 }, options = {} },
    { arch = "sm_90", defines = { A = 1 }, options = { "-lineinfo", "-use_fast_math" } },
    { arch = "sm_90", defines = { A = 1 }, options = { "-lineinfo" }, std = "c++20" },
    { arch = "sm_90", defines = { A = 1 }, options = { "-lineinfo" }, ptx = true },
    { arch = "sm_90", defines = { A = 1 }, options = { "-lineinfo" }, name = "other.cu" },
    { arch = "sm_90", defines = { A = 1 }, options = { "-lineinfo" }, headers = { ["h.h"] = "" } },
  }
  local seen = { [k] = "base" }
  for i, opts in ipairs(variants) do
    local ki = nvrtc.key(SIMPLE, opts)
    t.eq(seen[ki], nil, "variant " .. i .. " collides")
    seen[ki] = i
  end
  t.ok(nvrtc.key(SIMPLE .. " ", base) ~= k, "source change")
  -- length prefixes: moving bytes between a header's name and its content is a new key
  t.ok(nvrtc.key(SIMPLE, { headers = { ab = "c" } }) ~= nvrtc.key(SIMPLE, { headers = { a = "bc" } }))
  -- and so is moving a character from one option to the next
  t.ok(nvrtc.key(SIMPLE, { options = { "-a", "b" } }) ~= nvrtc.key(SIMPLE, { options = { "-ab", "" } }))
  -- defines are sorted: the table's insertion order does not matter
  local d1, d2 = {}, {}
  for i = 1, 20 do d1["M" .. i] = i end
  for i = 20, 1, -1 do d2["M" .. i] = i end
  t.eq(nvrtc.key(SIMPLE, { defines = d1 }), nvrtc.key(SIMPLE, { defines = d2 }))
  -- cache=false does not change what is being compiled
  t.eq(nvrtc.key(SIMPLE, { cache = false }), nvrtc.key(SIMPLE))
end)

local function corrupt_and_check(how, mutate)
  local src = SIMPLE .. "// " .. how .. "\n"
  local good = assert(nvrtc.compile(src))
  local path = entry_path(good.key)
  local bytes = assert(read(path))
  write(path, mutate(bytes))
  local again = assert(nvrtc.compile(src))
  t.eq(again.cached, false, how .. ": detected as a miss")
  t.eq(again.cubin, good.cubin, how .. ": recompiled to the same cubin")
  same(again.kernels, good.kernels, how .. ": kernels")
  t.eq(read(path), bytes, how .. ": entry rewritten")
  local hit = assert(nvrtc.compile(src))
  t.eq(hit.cached, true, how .. ": a hit again")
  t.eq(hit.cubin, good.cubin)
end

t.test("a corrupted cache entry is recompiled and overwritten", function()
  corrupt_and_check("truncated", function(b) return b:sub(1, #b // 2) end)
  corrupt_and_check("byte flipped", function(b)
    local i = #b // 2
    return b:sub(1, i - 1) .. string.char(b:byte(i) ~ 0x20) .. b:sub(i + 1)
  end)
  corrupt_and_check("bad magic", function(b) return "XXXXXXXX" .. b:sub(9) end)
  corrupt_and_check("empty", function() return "" end)
  corrupt_and_check("trailing bytes", function(b) return b .. "junk" end)
  corrupt_and_check("last byte", function(b) return b:sub(1, -2) .. string.char(b:byte(-1) ~ 1) end)
end)

t.test("an entry under another key's name is a miss", function()
  local a = assert(nvrtc.compile(SIMPLE .. "// a\n"))
  local b = assert(nvrtc.compile(SIMPLE .. "// b\n"))
  write(entry_path(b.key), read(entry_path(a.key)))
  local again = assert(nvrtc.compile(SIMPLE .. "// b\n"))
  t.eq(again.cached, false)
end)

t.test("an unwritable cache folder still compiles", function()
  local blocker = CACHE .. "/not-a-dir"
  write(blocker, "x") -- a file where a folder should be: fails even for root
  local old = nvrtc.set_cache_dir(blocker .. "/nvrtc")
  local ok, r1, r2 = pcall(function()
    return nvrtc.compile(SIMPLE .. "// unwritable\n"), nvrtc.compile(SIMPLE .. "// unwritable\n")
  end)
  nvrtc.set_cache_dir(old)
  t.ok(ok, r1)
  t.ok(r1 and r1.cubin:sub(1, 4) == "\127ELF")
  t.eq(r1.cached, false)
  t.eq(r2.cached, false)
  t.eq(r2.cubin, r1.cubin)
end)

t.test("cache = false neither reads nor writes", function()
  local src = SIMPLE .. "// nocache\n"
  local r = assert(nvrtc.compile(src, { cache = false }))
  t.eq(r.cached, false)
  t.eq(read(entry_path(r.key)), nil)
  assert(nvrtc.compile(src))
  t.eq(assert(nvrtc.compile(src, { cache = false })).cached, false)
  t.eq(assert(nvrtc.compile(src)).cached, true)
end)

t.test("cache_dir: set_cache_dir, then KM_CACHE_DIR, XDG_CACHE_HOME, HOME", function()
  t.eq(nvrtc.cache_dir(), CACHE)
  local old = nvrtc.set_cache_dir("/tmp/elsewhere")
  t.eq(old, CACHE)
  t.eq(nvrtc.cache_dir(), "/tmp/elsewhere")
  nvrtc.set_cache_dir(old)
  local probe = KMRUN .. " -e 'print(require(\"km.nvrtc\").cache_dir())'"
  local out = sh("env -u XDG_CACHE_HOME KM_CACHE_DIR=/k HOME=/h " .. probe)
  t.eq(out, "/k\n")
  out = sh("env -u KM_CACHE_DIR XDG_CACHE_HOME=/x HOME=/h " .. probe)
  t.eq(out, "/x/kmrun/nvrtc\n")
  out = sh("env -u KM_CACHE_DIR -u XDG_CACHE_HOME HOME=/h " .. probe)
  t.eq(out, "/h/.cache/kmrun/nvrtc\n")
end)

-- ---- compile_many --------------------------------------------------------------------

-- A distinct kernel per index: every test below starts from cold cache entries.
local function variant(tag, i)
  return SIMPLE:gsub("add", "add_" .. tag .. "_" .. i) .. "// " .. tag .. " " .. i .. "\n"
end

-- compile's table without the per-call fields
local function program(r)
  local c = {}
  for k, v in pairs(r) do if k ~= "ms" and k ~= "cached" then c[k] = v end end
  return c
end

t.test("compile_many returns compile's results, in order, cached afterwards", function()
  local list = {
    { variant("order", 1) },
    { variant("order", 2), { arch = "sm_90", ptx = true } },
    { variant("order", 3), { arch = "compute_90" } },
    { variant("order", 4), { arch = "sm_80", defines = { WIDTH = 4, ON = true }, name = "four.cu" } },
    { variant("order", 5), { options = { "-lineinfo" }, headers = { ["x.h"] = "#define X 1\n" } } },
    { variant("order", 6), { cache = false } },
  }
  local rs = nvrtc.compile_many(list, { threads = 3 })
  t.eq(#rs, #list)
  for i, r in ipairs(rs) do
    t.eq(r.error, nil, "entry " .. i)
    t.eq(r.cached, false, "entry " .. i .. " was compiled")
    t.eq(type(r.ms), "number")
    t.ok(r.kernels["add_order_" .. i], "entry " .. i .. " is in its own slot")
    local one = assert(nvrtc.compile(list[i][1], list[i][2]))
    t.eq(one.cached, i ~= 6, "entry " .. i .. ": compile after compile_many hits the cache")
    same(program(r), program(one), "entry " .. i)
  end
  t.eq(rs[1].cubin:sub(1, 4), "\127ELF")
  t.ok(rs[2].ptx:find(".entry add_order_2", 1, true))
  t.eq(rs[3].cubin, nil)
  t.eq(rs[4].arch, "sm_80")
  t.eq(rs[4].name, "four.cu")
  t.eq(read(entry_path(rs[6].key)), nil, "cache = false is per entry")
  -- and a second compile_many is all hits, with the same bytes
  local again = nvrtc.compile_many(list)
  for i, r in ipairs(again) do
    t.eq(r.cached, i ~= 6, "entry " .. i)
    t.eq(r.cubin, rs[i].cubin)
    t.eq(r.key, rs[i].key)
  end
end)

t.test("compile_many: a failure stays in its slot with NVRTC's log", function()
  local broken = "extern \"C\" __global__ void k(float *y) {\n  y[0] = 1.0f;\n  y[1] = ;\n}\n"
  local list = {
    { variant("fail", 1) },
    { broken, { name = "broken.cu" } },
    { variant("fail", 3), { options = { "--no-such-option" } } },
    { variant("fail", 4) },
  }
  local rs = nvrtc.compile_many(list, { threads = 2 })
  t.eq(#rs, 4)
  t.ok(rs[1].cubin and rs[4].cubin)
  t.eq(rs[2].code, "NVRTC_ERROR_COMPILATION")
  t.ok(rs[2].error:find("broken.cu(3)", 1, true), rs[2].error)
  local _, log, code = nvrtc.compile(broken, { name = "broken.cu" })
  t.eq(rs[2].error, log, "the same log compile returns")
  t.eq(rs[2].code, code)
  t.eq(rs[2].key, nvrtc.key(broken, { name = "broken.cu" }))
  t.eq(rs[2].cubin, nil)
  t.eq(rs[3].code, "NVRTC_ERROR_INVALID_OPTION")
  t.ok(rs[3].error:find("^NVRTC_ERROR_INVALID_OPTION: "), rs[3].error)
end)

t.test("compile_many: threads = 1, more threads than entries, an empty list", function()
  local list = {}
  for i = 1, 3 do list[i] = { variant("threads", i) } end
  local one = nvrtc.compile_many(list, { threads = 1 })
  local many = nvrtc.compile_many(list, { threads = 64 })
  for i = 1, 3 do
    t.ok(one[i].kernels["add_threads_" .. i])
    t.eq(many[i].cubin, one[i].cubin)
    t.eq(many[i].cached, true)
  end
  same(nvrtc.compile_many({}), {})
  same(nvrtc.compile_many({}, { threads = 4 }), {})
end)

t.test("compile_many: misuse raises and names the entry", function()
  local ok1 = { SIMPLE }
  t.raises(function() nvrtc.compile_many() end, "table expected")
  t.raises(function() nvrtc.compile_many(SIMPLE) end, "table expected")
  t.raises(function() nvrtc.compile_many({}, 4) end, "table expected")
  t.raises(function() nvrtc.compile_many({}, { thread = 4 }) end, "unknown option 'thread'")
  t.raises(function() nvrtc.compile_many({}, { threads = 0 }) end, "'threads'")
  t.raises(function() nvrtc.compile_many({}, { threads = 1.5 }) end, "'threads'")
  t.raises(function() nvrtc.compile_many({}, { threads = "2" }) end, "'threads'")
  t.raises(function() nvrtc.compile_many({ ok1, ok1, { SIMPLE, { arch = "sm90" } } }) end,
    "compile_many: entry 3: option 'arch': bad architecture 'sm90'")
  t.raises(function() nvrtc.compile_many({ ok1, SIMPLE }) end,
    "compile_many: entry 2: expected a { source, opts } table, got string")
  t.raises(function() nvrtc.compile_many({ { 42 } }) end, "compile_many: entry 1: source must be a string")
  t.raises(function() nvrtc.compile_many({ { SIMPLE, "sm_90" } }) end, "compile_many: entry 1: opts must be a table")
  t.raises(function() nvrtc.compile_many({ ok1, { SIMPLE, { archh = 1 } } }) end,
    "compile_many: entry 2: unknown option 'archh'")
  t.raises(function() nvrtc.compile_many({ { SIMPLE, { defines = { X = {} } } } }) end,
    "compile_many: entry 1: option 'defines.X'")
  t.raises(function() nvrtc.compile_many({ { SIMPLE, { options = { 1 } } } }) end,
    "compile_many: entry 1: option 'options[1]'")
  t.raises(function() nvrtc.compile_many({ { SIMPLE, { std = "gnu++17" } } }) end,
    "compile_many: entry 1: option 'std'")
  -- compile says it as before
  t.raises(function() nvrtc.compile(SIMPLE, { arch = "sm90" }) end, "bad argument #2 to")
end)

t.test("compile_many: a metamethod in opts cannot pull strings from under the threads", function()
  -- entry 2's opts, while being read, drop entry 1's source (built already) and collect it
  local list = { { variant("meta", 1) } }
  list[2] = { variant("meta", 2), setmetatable({}, { __index = function(_, k)
    if k == "arch" then
      list[1][1] = "junk"
      collectgarbage("collect")
      return "sm_90"
    end
  end }) }
  local rs = nvrtc.compile_many(list)
  t.eq(list[1][1], "junk")
  t.ok(rs[1].kernels.add_meta_1, "entry 1 compiled the source it was given")
  t.ok(rs[2].kernels.add_meta_2)
  -- and one that empties the list midway raises for the entry it took away
  list = { { variant("meta", 3) } }
  list[2] = { variant("meta", 4), setmetatable({}, { __index = function(_, k)
    if k == "arch" then list[3] = nil; collectgarbage("collect") end
  end }) }
  list[3] = { variant("meta", 5) }
  t.raises(function() nvrtc.compile_many(list) end, "compile_many: entry 3: expected a { source, opts } table, got nil")
end)

t.test("compile_many beside a serial loop: 16 kernels of about fifty lines", function()
  local list = {}
  for i = 1, 16 do
    list[i] = { BIG:gsub("fused", "fused_" .. i):gsub("0%.5f %*", i .. ".5f *"), { arch = "sm_90", cache = false } }
  end
  local wall = require("km.timing").wall
  local c0, t0 = os.clock(), wall()
  for i = 1, #list do assert(nvrtc.compile(list[i][1], list[i][2])) end
  local serial, serial_cpu = wall() - t0, os.clock() - c0
  c0, t0 = os.clock(), wall()
  local rs = nvrtc.compile_many(list)
  local par, par_cpu = wall() - t0, os.clock() - c0
  for i = 1, #rs do t.ok(rs[i].cubin, rs[i].error) end
  local np = io.popen("nproc")
  local ncpu = tonumber(np:read("l")) or 1
  np:close()
  t.note(string.format("16 kernels: serial %.2f s (CPU %.2f s); compile_many on %d threads %.2f s (CPU %.2f s): %.2fx",
    serial, serial_cpu, math.min(16, ncpu), par, par_cpu, serial / par))
end)

-- ---- warming km.serve.pool's cache ---------------------------------------------------------

local eval = require "km.serve.pool"
local judge = require "km.judge"

local function cands(tag, n)
  local cs = {}
  for i = 1, n do
    cs[i] = { name = tag .. i, source = variant(tag, i) .. "#ifndef BLOCK\n#error no BLOCK\n#endif\n",
              params = { BLOCK = 64 * i, FAST = i % 2 == 0 } }
  end
  return cs
end

t.test("judge.compile_opts is what the judge compiles a candidate with", function()
  same(judge.compile_opts("sm_90", { B = 1 }), { arch = "sm_90", defines = { B = 1 }, name = "kernel.cu" })
  same(judge.compile_opts("sm_80", {}, "reference"), { arch = "sm_80", defines = {}, name = "reference.cu" })
end)

t.test("eval.warm: afterwards the judge's compile of each candidate is a cache hit", function()
  local other = tmpdir()
  local cs = cands("warm", 5)
  cs[6] = { name = "broken", source = "extern \"C\" __global__ void k(float *y) { y[0] = ; }", params = {} }
  cs[7] = { name = "bad params", source = SIMPLE, params = { ["not a macro"] = 1 } }
  cs[8] = { name = "no source" }
  local good, bad = eval.warm(cs, "sm_90", { cache_dir = other, threads = 2 })
  t.eq(good, 5)
  t.eq(bad, 1, "the broken one; bad params are skipped, not compiled")
  t.eq(nvrtc.cache_dir(), CACHE, "the driver's own cache folder is back")
  nvrtc.set_cache_dir(other)
  local ok, err = pcall(function()
    for i = 1, 5 do
      local r = assert(nvrtc.compile(cs[i].source, judge.compile_opts("sm_90", cs[i].params)))
      t.eq(r.cached, true, cs[i].name)
      -- spelled out, as judge.lua's prepare() calls it for a candidate
      r = assert(nvrtc.compile(cs[i].source, { arch = "sm_90", defines = cs[i].params, name = "kernel.cu" }))
      t.eq(r.cached, true, cs[i].name)
      t.eq(assert(nvrtc.compile(cs[i].source, judge.compile_opts("sm_80", cs[i].params))).cached, false,
        "another arch is another entry")
    end
  end)
  nvrtc.set_cache_dir(CACHE)
  os.execute("rm -rf '" .. other .. "'")
  t.ok(ok, err)
  -- into this process's cache when no folder is named; nothing at all without an arch
  local cs2 = cands("warm_here", 2)
  t.eq(eval.warm(cs2, "sm_90"), 2)
  t.eq(assert(nvrtc.compile(cs2[1].source, judge.compile_opts("sm_90", cs2[1].params))).cached, true)
  t.eq(eval.warm(cands("warm_noarch", 1), nil), 0)
  t.eq(eval.warm({}, "sm_90"), 0)
end)

-- A pool whose workers are fakes in this process (proc.spawn and proc.select replaced):
-- each compiles its job when it is sent, as the real judge would, with the judge's options
-- and the cache folder from its environment, and answers whether that was a cache hit.
-- opts.compile_selects = K: a compile process is still compiling until select has been
-- asked about it K times, and only then compiles (into the cache) and answers.
local function fake_pool(opts, run)
  local proc = require "km.proc"
  local json = require "km.json"
  local spawn, select = proc.spawn, proc.select
  local envs = {}
  local slow = opts.compile_selects
  proc.spawn = function(argv, o)
    local env = o.env
    if argv[2]:match("compiler%.lua$") then
      -- a compile process: compiles each request into its environment's cache at once, or
      -- once it has been selected `slow` times
      local inbox, todo, asked, c = {}, {}, 0, {}
      local function compile(req)
        local old = nvrtc.set_cache_dir(env.KM_CACHE_DIR)
        local r = nvrtc.compile(req.source, req.opts)
        nvrtc.set_cache_dir(old)
        inbox[#inbox + 1] = json.encode { id = req.id, ok = r ~= nil }
      end
      function c.send(_, msg)
        local req = json.decode(msg)
        if slow then todo[#todo + 1] = req else compile(req) end
        return true
      end
      function c.ready()
        asked = asked + 1
        return not slow or asked >= slow
      end
      function c.recv()
        if #todo > 0 then compile(table.remove(todo, 1)) end
        return table.remove(inbox, 1)
      end
      function c.close() end
      return c
    end
    envs[#envs + 1] = env
    local inbox = { json.encode { ok = true, device = { arch = "sm_90" }, device_count = 1 } }
    local p = {}
    function p.recv() 
      local m = table.remove(inbox, 1)
      if m then return m end
      return nil, "timed out", "TIMEOUT"
    end
    function p.send(_, msg)
      local req = json.decode(msg)
      if req.op == "eval" then
        local old = nvrtc.set_cache_dir(env.KM_CACHE_DIR)
        local r = nvrtc.compile(req.candidate.source, judge.compile_opts("sm_90", req.candidate.params or {}))
        nvrtc.set_cache_dir(old)
        inbox[#inbox + 1] = json.encode { id = req.id, verdict = { status = r and "correct" or "compile_error",
          candidate = req.candidate.name, cached_compile = r and r.cached or false } }
      end
      return true
    end
    function p.wait() return { code = 0 } end
    function p.kill() end
    function p.close() end
    return p
  end
  proc.select = function(ps)
    for i, p in ipairs(ps) do if not p.ready or p.ready() then return p, i end end
    return nil
  end
  local ok, a, b = pcall(function()
    local pool = assert(eval.pool(opts))
    local r = run(pool)
    pool:close()
    return r, pool
  end)
  proc.spawn, proc.select = spawn, select
  if not ok then error(a, 0) end
  return a, b, envs
end

-- n fresh candidates named `name` judged by a fake pool (opts) at once; checks that the first
-- went straight to the idle worker and every later one was a cache hit (`how`).
-- -> the verdicts, the pool, the workers' environments
local function warmed_jobs(name, n, opts, how)
  local jobs = {}
  for i, c in ipairs(cands(name, n)) do jobs[i] = { "task", c } end
  local vs, pool, envs = fake_pool(opts, function(p) return p:eval_many(jobs) end)
  t.eq(vs[1].cached_compile, false, "the first job went straight to the idle worker")
  for i = 2, n do
    t.eq(vs[i].status, "correct")
    t.eq(vs[i].cached_compile, true, "job " .. i .. " " .. how)
  end
  return vs, pool, envs
end

t.test("a pool warms the jobs that wait, into its workers' cache folder", function()
  local _, pool, envs = warmed_jobs("pool", 4, { gpus = { 0 } }, "was warmed while it waited")
  t.eq(envs[1].KM_CACHE_DIR, CACHE, "the driver's set_cache_dir reaches the workers")
  t.eq(pool.warm_stats.jobs, 3)
  t.eq(pool.warm_stats.failed, 0)

  -- a folder named in opts.env is the one warmed, whatever this process uses
  local other = tmpdir()
  _, pool, envs = warmed_jobs("pool_env", 3, { gpus = { 0 }, env = { KM_CACHE_DIR = other } }, "was warmed into opts.env's folder")
  os.execute("rm -rf '" .. other .. "'")
  t.eq(envs[1].KM_CACHE_DIR, other)
  t.eq(nvrtc.cache_dir(), CACHE)

  -- warm = false turns it off; a single job on an idle worker is never compiled twice
  local cs = cands("pool_off", 2)
  local vs
  vs, pool = fake_pool({ gpus = { 0 }, warm = false },
    function(p) return p:eval_many { { "task", cs[1] }, { "task", cs[2] } } end)
  t.eq(vs[2].cached_compile, false)
  t.eq(pool.warm_stats.jobs, 0)
  local v
  v, pool = fake_pool({ gpus = { 0 } }, function(p) return p:eval("task", cands("pool_one", 1)[1]) end)
  t.eq(v.cached_compile, false)
  t.eq(pool.warm_stats.jobs, 0)
end)

-- The offline replay's tuning steps follow each other faster than a compile: a waiting job's
-- compile ahead is still under way when the worker is free. It goes to the worker when that
-- compile ends, instead of being compiled a second time there.
t.test("a job whose compile ahead is under way goes to the worker when it ends, a cache hit", function()
  local _, pool = warmed_jobs("pool_race", 3, { gpus = { 0 }, compile_selects = 3 }, "waited for its compile ahead")
  t.eq(pool.warm_stats.failed, 0)
  -- a task's CUDA reference (which the worker compiles when it sets the task up) is warmed
  -- with the first of its jobs that waits, once
  local ref = "extern \"C\" __global__ void ref_warm(float *y) { y[threadIdx.x] = 2.0f; }"
  local tsk = { dir = "/tasks/t_ref_warm", name = "t_ref_warm", reference = { source_text = ref } }
  local ro = judge.compile_opts("sm_90", {}, "reference")
  t.eq(eval.compiled(ref, ro, CACHE), false)
  local cs = cands("pool_ref", 2)
  fake_pool({ gpus = { 0 } }, function(p) return p:eval_many { { tsk, cs[1] }, { tsk, cs[2] } } end)
  t.eq(eval.compiled(ref, ro, CACHE), true, "the reference is in the workers' cache")
end)

-- ---- kernel signatures ---------------------------------------------------------------

local TRICKY = [==[
// extern "C" __global__ void commented_out(int x) {}
/* extern "C" __global__ void also_commented(int y) {} */
#define KERNEL extern "C" __global__ \
        void in_macro(int q)
#include "params.h"
const char *s = "extern \"C\" __global__ void in_string(int z) {}";
const char *r = R"raw(extern "C" __global__ void in_raw(int a) {})raw";
const char c = '"';
__device__ float helper(float x) { return x * 2.0f; }
__global__ void mangled(float *x) {}
template <int B> __global__ void templ(float *x) {}

extern "C" __global__ void __launch_bounds__(256, 2)
scale(float * __restrict__ out,   // the output
      const float* in, /* input, float alpha */ float alpha,
      unsigned long long n) { out[0] = in[0] * alpha; }

extern "C" {
  __global__ void in_block_a(const __nv_bfloat16 *a, __nv_bfloat16 b, double d, char c,
                             unsigned char uc, bool flag) {}
  __launch_bounds__(128) __global__ void in_block_b(short s, unsigned short us, int8_t i8,
      uint8_t u8, int16_t i16, uint16_t u16, int32_t i32, uint32_t u32, int64_t i64,
      uint64_t u64, long l, ptrdiff_t pd, unsigned u, signed char sc, long long ll,
      unsigned int ui, size_t sz, long int li) {
    if (s) { int inner = 0; (void)inner; }
  }
  __device__ int not_a_kernel(int x) { return x; }
  __global__ void declared(Params p, float4 v, MY_T m);
}
extern "C" __global__ void no_params() {}
extern "C" __global__ void void_params(void) {}
extern "C" __global__ void unnamed(float *, int) {}
extern "C" __global__ void grid_const(const __grid_constant__ Params p, std::size_t n, half h) {}
extern "C" __global__ void arrays(float x[16], int n = 4) {}
extern "C" __global__ void declared(Params p, float4 v, MY_T m) {}
extern "C++" { __global__ void cxx_block(int x) {} }
#define LB(n) __launch_bounds__(n)
extern "C" __global__ void LB(64) __attribute__((used)) macro_attr(int n) {}
extern "C" __global__ void __cluster_dims__(2, 1, 1) clustered(float *x) {}
]==]

local function sig(k)
  local parts = {}
  for i, p in ipairs(k.params) do parts[i] = p.name .. ":" .. p.type .. ":" .. p.kind end
  return table.concat(parts, ", ")
end

t.test("parse_kernels finds extern \"C\" kernels and skips the rest", function()
  local ks = nvrtc.parse_kernels(TRICKY)
  local names = {}
  for name in pairs(ks) do names[#names + 1] = name end
  table.sort(names)
  t.eq(table.concat(names, " "),
    "arrays clustered declared grid_const in_block_a in_block_b macro_attr no_params scale " ..
    "unnamed void_params")
  t.eq(sig(ks.macro_attr), "n:int:i32")
  t.eq(sig(ks.clustered), "x:float *:ptr")
end)

t.test("parameter names, types and kinds", function()
  local ks = nvrtc.parse_kernels(TRICKY)
  t.eq(sig(ks.scale), "out:float * __restrict__:ptr, in:const float *:ptr, alpha:float:f32, " ..
                      "n:unsigned long long:u64")
  t.eq(sig(ks.in_block_a), "a:const __nv_bfloat16 *:ptr, b:__nv_bfloat16:bf16, d:double:f64, " ..
                           "c:char:i8, uc:unsigned char:u8, flag:bool:unknown")
  local kinds = {}
  for i, p in ipairs(ks.in_block_b.params) do kinds[i] = p.name .. "=" .. p.kind end
  t.eq(table.concat(kinds, " "),
    "s=i16 us=u16 i8=i8 u8=u8 i16=i16 u16=u16 i32=i32 u32=u32 i64=i64 u64=u64 l=i64 pd=i64 " ..
    "u=u32 sc=i8 ll=i64 ui=u32 sz=u64 li=i64")
  t.eq(sig(ks.declared), "p:Params:unknown, v:float4:unknown, m:MY_T:unknown")
  t.eq(#ks.no_params.params, 0)
  t.eq(#ks.void_params.params, 0)
  t.eq(sig(ks.unnamed), ":float *:ptr, :int:i32")
  t.eq(sig(ks.grid_const), "p:const Params:unknown, n:std::size_t:u64, h:half:f16")
  t.eq(sig(ks.arrays), "x:float[16]:ptr, n:int:i32")
end)

t.test("signatures survive the cache round trip", function()
  local src = [[
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct Params { int a; float b; };
#define MY_T int
extern "C" __global__ void __launch_bounds__(256, 2)
scale(float * __restrict__ out, const float* in, /* input */ float alpha, unsigned long long n) {
  out[0] = in[0] * alpha;
}
extern "C" {
  __global__ void in_block(const __nv_bfloat16 *a, __nv_bfloat16 b, double d, char c, bool f) {}
  __global__ void declared(Params p, float4 v, MY_T m);
}
extern "C" __global__ void unnamed(float *, int) {}
extern "C" __global__ void grid_const(const __grid_constant__ Params p, size_t n, __half h) {}
extern "C" __global__ void arrays(float x[16], int n = 4) {}
extern "C" __global__ void declared(Params p, float4 v, MY_T m) {}
]]
  local first, log = nvrtc.compile(src)
  t.ok(first, log)
  t.eq(first.cached, false)
  local hit = assert(nvrtc.compile(src))
  t.eq(hit.cached, true)
  same(hit.kernels, first.kernels, "kernels")
  same(hit.kernels, nvrtc.parse_kernels(src), "kernels")
  t.eq(sig(hit.kernels.grid_const), "p:const Params:unknown, n:size_t:u64, h:__half:f16")
end)

t.test("the scanner copes with junk", function()
  for _, src in ipairs({ "", "extern", "extern \"C\"", "extern \"C\" __global__ void k(",
                         "extern \"C\" __global__ void k(int x", "/* unterminated", "\"open",
                         "R\"x(never closed", "extern \"C\" { __global__ void k(int a) {} ",
                         "}}}} extern \"C\" __global__ void k(int a) {}", string.rep("(", 1000),
                         string.rep("{", 1000) .. "extern \"C\" __global__ void deep(int a) {}" }) do
    local ok, ks = pcall(nvrtc.parse_kernels, src)
    t.ok(ok, ks)
    t.eq(type(ks), "table")
  end
  t.eq(#nvrtc.parse_kernels("}}}} extern \"C\" __global__ void k(int a) {}").k.params, 1)
end)

-- ---- misuse --------------------------------------------------------------------------

t.test("misuse raises and names the field", function()
  t.raises(function() nvrtc.compile(42) end, "string expected")
  t.raises(function() nvrtc.compile() end, "string expected")
  t.raises(function() nvrtc.compile(SIMPLE, "sm_90") end, "table expected")
  t.raises(function() nvrtc.compile(SIMPLE, { archh = "sm_90" }) end, "unknown option 'archh'")
  t.raises(function() nvrtc.compile(SIMPLE, { [1] = "x" }) end, "unknown option")
  t.raises(function() nvrtc.compile(SIMPLE, { arch = "sm90" }) end, "'arch'")
  t.raises(function() nvrtc.compile(SIMPLE, { arch = "sm_9" }) end, "'arch'")
  t.raises(function() nvrtc.compile(SIMPLE, { arch = "gfx90a" }) end, "'arch'")
  t.raises(function() nvrtc.compile(SIMPLE, { arch = 90 }) end, "'arch'")
  t.raises(function() nvrtc.compile(SIMPLE, { options = "-lineinfo" }) end, "'options'")
  t.raises(function() nvrtc.compile(SIMPLE, { options = { "-lineinfo", 3 } }) end, "'options[2]'")
  t.raises(function() nvrtc.compile(SIMPLE, { defines = { ["1X"] = 1 } }) end, "'defines'")
  t.raises(function() nvrtc.compile(SIMPLE, { defines = { X = {} } }) end, "'defines.X'")
  t.raises(function() nvrtc.compile(SIMPLE, { defines = "X" }) end, "'defines'")
  t.raises(function() nvrtc.compile(SIMPLE, { headers = { ["a.h"] = 1 } }) end, "'headers[\"a.h\"]'")
  t.raises(function() nvrtc.compile(SIMPLE, { headers = { "x" } }) end, "'headers'")
  t.raises(function() nvrtc.compile(SIMPLE, { ptx = 1 }) end, "'ptx'")
  t.raises(function() nvrtc.compile(SIMPLE, { cache = "no" }) end, "'cache'")
  t.raises(function() nvrtc.compile(SIMPLE, { name = false }) end, "'name'")
  t.raises(function() nvrtc.compile(SIMPLE, { std = "gnu++17" }) end, "'std'")
  t.raises(function() nvrtc.key(SIMPLE, { arch = "sm90" }) end, "'arch'")
  t.raises(function() nvrtc.parse_kernels(nil) end, "string expected")
  t.raises(function() nvrtc.set_cache_dir("") end, "empty path")
end)

os.execute("rm -rf '" .. CACHE .. "'")
t.done()
