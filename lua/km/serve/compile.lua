-- km.serve.compile — compiling on the CPUs, apart from the GPU workers: candidates compiled
-- ahead here (M.warm) or in compile processes (M.compilers, each running km.serve.compiler)
-- into the disk cache the workers read, whether the cache holds a compile (M.compiled), and
-- the compile-only verdict given where there is no GPU (M.compile_check). km.serve.pool
-- exports all four; the agent loop (km.run) reaches them through it.
--
-- Owns: nothing between calls but the compile processes a M.compilers table holds (closed
-- by its close()).
local proc = require "km.proc"
local json = require "km.json"
local nvrtc = require "km.nvrtc"
local judge = require "km.judge" -- compile_opts only; loading it touches no CUDA
local timing = require "km.timing" -- wall() only

local fmt = string.format
local pcall, ipairs, pairs, type = pcall, ipairs, pairs, type
local M = {}

-- M.warm(cands, arch, { cache_dir =, threads = }): compiles candidates ({ source, params })
-- here, on `threads` CPUs (all by default), exactly as the judge will for a GPU of `arch`
-- (judge.compile_opts), into cache_dir (default: this process's cache). A candidate that
-- fails to compile, or whose params NVRTC options cannot express, is skipped: its worker
-- gives the verdict. Returns how many compiled (or were already cached) and how many failed.
function M.warm(cands, arch, opts)
  opts = opts or {}
  if type(arch) ~= "string" then return 0, 0 end -- no default arch: that would load CUDA
  local list = {}
  for _, c in ipairs(cands) do
    if type(c) == "table" and type(c.source) == "string" and c.source ~= "" then
      local o = judge.compile_opts(arch, c.params or {})
      if pcall(nvrtc.key, c.source, o) then list[#list + 1] = { c.source, o } end
    end
  end
  if #list == 0 then return 0, 0 end
  local swap = opts.cache_dir ~= nil and opts.cache_dir ~= nvrtc.cache_dir()
  local old
  if swap then old = nvrtc.set_cache_dir(opts.cache_dir) end
  local ok, rs = pcall(nvrtc.compile_many, list, { threads = opts.threads })
  if swap then nvrtc.set_cache_dir(old) end
  if not ok then return 0, #list end
  local good = 0
  for _, r in ipairs(rs) do if not r.error then good = good + 1 end end
  return good, #list - good
end

-- Compile processes (km.serve.compiler): requests go out without waiting; each compiles into
-- the shared disk cache. M.compilers(n, cache_dir) -> { submit(source, opts [, on_done]),
-- drain(ms), outstanding(), busy(), close() }. on_done(answer) is called from drain with
-- { ok, cached, ms, error } (ok false, error "compile process died" when its process died);
-- busy() lists the processes with requests out (for proc.select).
function M.compilers(n, cache_dir)
  local procs, out, sent = {}, {}, 0
  local waiting = {} -- request id -> { i = process index, on_done }
  local c = { done = 0, failed = 0 }
  local function answered(id, r)
    local w = waiting[id]
    waiting[id] = nil
    if w and w.on_done then w.on_done(r) end
  end
  local function start(i)
    local p = proc.spawn({ package.km_exe, package.km_libdir .. "/km/serve/compiler.lua" },
      { env = cache_dir and { KM_CACHE_DIR = cache_dir } or nil, clean_env = true, stderr = "null" })
    procs[i], out[i] = p or nil, 0
    return p
  end
  function c.submit(source, opts, on_done)
    local best -- the least busy process; another is started while every one is busy, up to n
    for i = 1, n do
      if procs[i] and (not best or out[i] < out[best]) then best = i end
    end
    if not best or out[best] > 0 then
      for i = 1, n do
        if not procs[i] then
          if start(i) then best = i end
          break
        end
      end
    end
    sent = sent + 1
    if procs[best] and procs[best]:send(json.encode { id = sent, source = source, opts = opts }) then
      out[best] = out[best] + 1
      waiting[sent] = { i = best, on_done = on_done }
    elseif on_done then
      on_done { ok = false, error = "no compile process" }
    end
  end
  -- Collects answers for up to `ms`; returns how many requests are still out.
  function c.drain(ms)
    local deadline = timing.wall() + (ms or 0) / 1e3
    repeat
      local busy = {}
      for i = 1, n do if procs[i] and out[i] > 0 then busy[#busy + 1] = procs[i] end end
      if #busy == 0 then return 0 end
      local p = proc.select(busy, math.max(0, (deadline - timing.wall()) * 1e3))
      if not p then break end
      for i = 1, n do
        if procs[i] == p then
          local msg = p:recv(0)
          if msg then
            out[i] = out[i] - 1
            local r = json.decode(msg) or {}
            if r.ok then c.done = c.done + 1 else c.failed = c.failed + 1 end
            answered(r.id, r)
          else
            procs[i], out[i] = nil, 0 -- it died: the next submit starts another
            p:close()
            for id, w in pairs(waiting) do
              if w.i == i then answered(id, { ok = false, error = "compile process died" }) end
            end
          end
        end
      end
    until timing.wall() >= deadline
    return c.outstanding()
  end
  function c.outstanding()
    local k = 0
    for i = 1, n do k = k + (out[i] or 0) end
    return k
  end
  function c.busy()
    local list = {}
    for i = 1, n do if procs[i] and out[i] > 0 then list[#list + 1] = procs[i] end end
    return list
  end
  function c.close()
    for i = 1, n do if procs[i] then procs[i]:close() end procs[i] = nil end
  end
  return c
end

-- true when the NVRTC cache in `dir` (default: this process's) holds source compiled with
-- opts (judge.compile_opts'), false when not, nil when NVRTC cannot key it (bad options).
-- An entry that is there but damaged reads as a miss where it is used, and is compiled again.
function M.compiled(source, opts, dir)
  dir = dir or nvrtc.cache_dir()
  local ok, key = pcall(nvrtc.key, source, opts)
  if not ok or not dir then return nil end
  local f = io.open(fmt("%s/%s/%s", dir, key:sub(1, 2), key), "rb")
  if f then f:close() end
  return f ~= nil
end

-- What a candidate gets where there is no GPU (ctx.eval without workers, kmrun eval, the
-- service's compile-only workers): kernel.cu compiled by NVRTC for `arch` (default sm_90),
-- launch.lua loaded in the sandbox and the kernels it calls looked up in the source, nothing
-- run. -> a verdict: compile_error, launch_error (it calls a kernel the source does not
-- define, as the judge would find on a GPU), or compiled (exit status 3).
function M.compile_check(cand, arch)
  local src = cand.source or ""
  local prog, log_text = nvrtc.compile(src, { arch = arch or "sm_90", defines = cand.params, name = "kernel.cu" })
  if not prog then
    return { status = "compile_error", feedback = require("km.feedback").compile(tostring(log_text), src, "kernel.cu"),
      compile_log = log_text }
  end
  local fn, err = require("km.sandbox").load(cand.launch or "", "launch.lua")
  if not fn then return { status = "compile_error", feedback = "launch.lua does not load: " .. tostring(err) } end
  local missing = require("km.sandbox").undefined_kernels(cand.launch, prog.kernels)
  if #missing > 0 then
    local defined = {}
    for name in pairs(prog.kernels or {}) do defined[#defined + 1] = name end
    table.sort(defined)
    return { status = "launch_error", compile_log = prog.log, kernels = prog.kernels,
      feedback = fmt("launch.lua calls k.%s, which kernel.cu does not define (its kernels: %s); found without " ..
        "running it (no GPU).", table.concat(missing, ", k."), #defined > 0 and table.concat(defined, ", ") or "none") }
  end
  return { status = "compiled", feedback = "kernel.cu compiles and launch.lua loads (not run: no GPU).",
    compile_log = prog.log, kernels = prog.kernels }
end

return M
