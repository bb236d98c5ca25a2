-- km.ffi — the LuaJIT binding of kmrun's public C API (include/kmrun.h) through the FFI.
--
--   local kf = require "km.ffi"            -- LuaJIT only
--   local K = kf.load()                    -- libkmrun.so: $KMRUN_LIB, beside the install, or the system's
--   local rt = assert(kf.open())           -- nil, message, code without a GPU
--   local prog = assert(kf.compile(src, { arch = "sm_90" }))
--   local mod = assert(rt:load(prog)); local k = assert(mod:kernel("relu"))
--   local x = assert(rt:buffer("f32", n)); x:random(kf.UNIFORM, -1, 1, 42)
--   local launch, spec = k:launcher({ grid = g, block = 256 }, x, y, kf.i32(n))   -- packed once
--   launch()                               -- the hot path: one km_launch call
--   kf.allclose(y, want, { atol = 0 })     -- -> { ok, n, mismatches, max_abs, ... }
--   rt:time(spec, { mode = "cold" })       -- spec: launcher's 2nd value -> { median, p25, p75, n, ... }
--
-- The declarations are read from kmrun.h itself (the installed header, or include/ in the
-- source tree), so they cannot drift from the library. Expected failures return
-- nil, message, code (STYLE.md); misuse raises. Handles are freed by :free() or the GC.
local ffi = require "ffi"

local M = {}
local C -- the loaded library
local error, type, tostring, tonumber, setmetatable, select, pairs, pcall =
  error, type, tostring, tonumber, setmetatable, select, pairs, pcall

local DTYPES = { f32 = 0, f64 = 1, f16 = 2, bf16 = 3, i8 = 4, i32 = 5, i64 = 6, u8 = 7 }
M.UNIFORM, M.NORMAL, M.INT = 0, 1, 2

-- The folder this file is in, and the header's candidates around it.
local here = (debug.getinfo(1, "S").source:match("^@(.*)/km/ffi%.lua$")) or "lua"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- kmrun.h without its preprocessor lines (and the C++ guard): what ffi.cdef reads.
function M.header_cdef(text)
  local out, skip = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^#ifdef __cplusplus") then skip = 1
    elseif skip == 1 then if line:match("^#endif") then skip = 0 end
    elseif not line:match("^%s*#") then
      out[#out + 1] = (line:gsub("KMRUN_API%s+", ""))
    end
  end
  return table.concat(out, "\n")
end

local function find_header()
  local cands = { os.getenv("KMRUN_HEADER"), here .. "/../include/kmrun.h", here .. "/../../../include/kmrun.h" }
  for i = 1, 3 do
    local text = cands[i] and read(cands[i])
    if text then return text, cands[i] end
  end
  error("km.ffi: cannot find kmrun.h (set KMRUN_HEADER)", 3)
end

-- Loads libkmrun.so (path, or $KMRUN_LIB, or lib/ of the install this file belongs to, or
-- the system's search) and declares the API. Returns the ffi namespace.
function M.load(path)
  if C then return C end
  local text = find_header()
  M.HEADER_VERSION = tonumber(text:match("#define KMRUN_VERSION_NUM (%d+)"))
  ffi.cdef(M.header_cdef(text))
  local cands = { path, os.getenv("KMRUN_LIB"), here .. "/../../../lib/libkmrun.so", "kmrun" }
  local last
  for i = 1, 4 do
    if cands[i] then
      local ok, lib = pcall(ffi.load, cands[i])
      if ok then C = lib; M.C = lib; return lib end
      last = lib
    end
  end
  error("km.ffi: cannot load libkmrun.so (set KMRUN_LIB): " .. tostring(last), 2)
end

local function failure(st)
  return nil, ffi.string(C.km_errmsg()), ffi.string(C.km_errcode())
end

-- ==== runtime ====

local Rt = {}
Rt.__index = Rt

-- open([device]) -> rt | nil, message, code (KMRUN_ENODEV without a GPU)
function M.open(device)
  M.load()
  local out = ffi.new("km_rt*[1]")
  local st = C.km_open(M.HEADER_VERSION, device or -1, out)
  if st ~= 0 then return failure(st) end
  return setmetatable({ h = ffi.gc(out[0], C.km_close) }, Rt)
end

function Rt:close()
  if self.h then C.km_close(ffi.gc(self.h, nil)); self.h = nil end
end

function Rt:device()
  local info = ffi.new("km_device_info")
  if C.km_device(self.h, info) ~= 0 then return failure() end
  return { name = ffi.string(info.name), arch = ffi.string(info.arch), sm_count = info.sm_count }
end

function Rt:synchronize()
  if C.km_synchronize(self.h) ~= 0 then return failure() end
  return true
end

-- ==== compile ====

local Prog = {}
Prog.__index = Prog

-- compile(source, { arch =, name =, options = { ... }, cache = false }) -> prog | nil, log, code
function M.compile(src, opts)
  M.load()
  opts = opts or {}
  local o = ffi.new("km_compile_opts")
  local keep = {}
  o.name = opts.name
  o.arch = opts.arch
  if opts.options then
    local n = #opts.options
    local arr = ffi.new("const char*[?]", n)
    for i = 1, n do arr[i - 1] = opts.options[i] end
    keep[1] = arr
    o.options, o.noptions = arr, n
  end
  o.no_cache = opts.cache == false and 1 or 0
  local out = ffi.new("km_prog*[1]")
  local st = C.km_compile(src, o, out)
  local p = out[0] ~= nil and setmetatable({ h = ffi.gc(out[0], C.km_prog_free) }, Prog) or nil
  if st ~= 0 then
    local msg, code = ffi.string(C.km_errmsg()), ffi.string(C.km_errcode())
    return nil, p and p:log() ~= "" and p:log() or msg, code
  end
  return p
end

function Prog:log() return ffi.string(C.km_prog_log(self.h)) end
function Prog:key() return ffi.string(C.km_prog_key(self.h)) end
function Prog:cached() return C.km_prog_cached(self.h) == 1 end
function Prog:free() if self.h then C.km_prog_free(ffi.gc(self.h, nil)); self.h = nil end end

-- ==== modules, kernels, launches ====

local Mod, Kern = {}, {}
Mod.__index, Kern.__index = Mod, Kern

function Rt:load(prog)
  local out = ffi.new("km_mod*[1]")
  if C.km_mod_load(self.h, prog.h, out) ~= 0 then return failure() end
  return setmetatable({ h = ffi.gc(out[0], C.km_mod_free) }, Mod)
end

function Mod:kernel(name)
  local out = ffi.new("km_kern*[1]")
  if C.km_kern_get(self.h, name, out) ~= 0 then return failure() end
  return setmetatable({ h = out[0], mod = self, name = name }, Kern) -- pins its module
end

function Mod:free() if self.h then C.km_mod_free(ffi.gc(self.h, nil)); self.h = nil end end

-- Typed scalars for kernel arguments: kf.i32(n), kf.f32(x), ...
for name, ct in pairs({ i32 = "int32_t[1]", u32 = "uint32_t[1]", i64 = "int64_t[1]", u64 = "uint64_t[1]",
                        f32 = "float[1]", f64 = "double[1]" }) do
  M[name] = function(v) return ffi.new(ct, v) end
end

local function dim3(v, out)
  if type(v) == "number" then out[0], out[1], out[2] = v, 1, 1
  else out[0], out[1], out[2] = v[1] or 1, v[2] or 1, v[3] or 1 end
end

-- k:launcher(cfg, args...) -> a function that launches k with these arguments, packed once:
-- buffers (their device address), kf.i32(n)-style scalars, or cdata pointers.
function Kern:launcher(cfg, ...)
  local n = select("#", ...)
  local c = ffi.new("km_launch_cfg")
  dim3(cfg.grid, c.grid)
  dim3(cfg.block, c.block)
  c.shared_bytes = cfg.shared or 0
  local args = ffi.new("void*[?]", n > 0 and n or 1)
  local keep = { c, args }
  for i = 1, n do
    local a = select(i, ...)
    if type(a) == "table" and a.ptr then
      local p = ffi.new("uint64_t[1]", a.ptr)
      keep[#keep + 1] = p
      keep[#keep + 1] = a
      args[i - 1] = p
    elseif type(a) == "cdata" then
      keep[#keep + 1] = a
      args[i - 1] = ffi.cast("void*", a)
    else
      error("km.ffi: argument " .. i .. ": a buffer, kf.i32(x)-style scalar or cdata pointer, got " .. type(a), 2)
    end
  end
  local h, launch = self.h, C.km_launch
  local f = function()
    local st = launch(h, c, args)
    if st ~= 0 then return failure(st) end
    return true
  end
  return f, { kern = self, cfg = c, args = args, keep = keep }
end

-- ==== buffers ====

local Buf = {}
Buf.__index = Buf

-- rt:buffer(dtype, n_or_shape) -> buf (buf.ptr: the device address as a Lua number)
function Rt:buffer(dtype, shape)
  local dt = DTYPES[dtype] or error("km.ffi: unknown dtype " .. tostring(dtype), 2)
  if type(shape) == "number" then shape = { shape } end
  local sh = ffi.new("int64_t[?]", #shape)
  for i = 1, #shape do sh[i - 1] = shape[i] end
  local out = ffi.new("km_buf*[1]")
  if C.km_buf_new(self.h, dt, sh, #shape, out) ~= 0 then return failure() end
  local b = setmetatable({ h = ffi.gc(out[0], C.km_buf_free), dtype = dtype }, Buf)
  local p = ffi.new("uint64_t[1]")
  C.km_buf_ptr(b.h, p)
  b.ptr = p[0]
  return b
end

local function ok_or_fail(st) if st ~= 0 then return failure(st) end return true end
function Buf:random(dist, a, c, seed) return ok_or_fail(C.km_buf_random(self.h, dist or 0, a or -1, c or 1, seed or 0)) end
function Buf:fill(v) return ok_or_fail(C.km_buf_fill(self.h, v)) end
function Buf:poison() return ok_or_fail(C.km_buf_poison(self.h)) end
function Buf:copy(src) return ok_or_fail(C.km_buf_copy(self.h, src.h)) end
function Buf:free() if self.h then C.km_buf_free(ffi.gc(self.h, nil)); self.h = nil end end
function Buf:checksum()
  local out = ffi.new("uint64_t[1]")
  if C.km_buf_checksum(self.h, out) ~= 0 then return failure() end
  return out[0]
end
function Buf:guards_intact()
  local out = ffi.new("int[1]")
  if C.km_buf_check_guards(self.h, out) ~= 0 then return failure() end
  return out[0] == 1
end

-- ==== compare and timing ====

local function result_table(r)
  return { ok = r.ok == 1, n = tonumber(r.n), mismatches = tonumber(r.mismatches), nan = tonumber(r.nan_got),
           inf = tonumber(r.inf_got), unwritten = tonumber(r.unwritten), max_abs = r.max_abs,
           max_rel = r.max_rel, first = r.first >= 0 and tonumber(r.first) or nil }
end

local function tolerance(t)
  t = t or {}
  local tol = ffi.new("km_tolerance")
  tol.atol, tol.rtol = t.atol or 1e-8, t.rtol or 1e-5
  tol.equal_nan, tol.count_poison = t.equal_nan and 1 or 0, t.poison and 1 or 0
  return tol
end

-- allclose(got, want [, tol]) for two buffers -> result table | nil, message, code
function M.allclose(got, want, t)
  local r = ffi.new("km_compare_result")
  if C.km_allclose(got.h, want.h, tolerance(t), r) ~= 0 then return failure() end
  return result_table(r)
end

-- allclose_host(dtype, got, want, n [, tol]) for host cdata arrays (no GPU needed)
function M.allclose_host(dtype, got, want, n, t)
  M.load()
  local r = ffi.new("km_compare_result")
  if C.km_allclose_host(DTYPES[dtype], got, want, n, tolerance(t), r) ~= 0 then return failure() end
  return result_table(r)
end

-- A timing mode's value in kmrun.h's km_time_mode: "cold" is KM_TIME_COLD; nil for a name
-- that is not a mode.
local function mode_value(name)
  if type(name) ~= "string" or not name:match("^%l+$") then return nil end
  local ok, v = pcall(function() return C["KM_TIME_" .. name:upper()] end)
  return ok and tonumber(v) or nil
end

-- rt:time(spec, opts) -> { median, p25, p75, min, max, mean, n, rel_noise, total_ms }; spec is
-- k:launcher's second value. Timed in C (km_time_launch): no Lua runs per sample.
function Rt:time(spec, opts)
  opts = opts or {}
  local o = ffi.new("km_time_opts")
  o.mode = mode_value(opts.mode or "cold") or error("km.ffi: unknown mode " .. tostring(opts.mode), 2)
  o.warmup, o.min_samples, o.max_samples = opts.warmup or 0, opts.min_samples or 0, opts.max_samples or 0
  o.target, o.max_ms = opts.target or 0, opts.max_ms or 0
  local r = ffi.new("km_time_result")
  if C.km_time_launch(self.h, spec.kern.h, spec.cfg, spec.args, o, r) ~= 0 then return failure() end
  return { median = r.median, mean = r.mean, min = r.min, max = r.max, p25 = r.p25, p75 = r.p75,
           rel_noise = r.rel_noise, n = r.n, total_ms = r.total_ms }
end

function M.version() M.load(); return ffi.string(C.km_version()) end

return M
