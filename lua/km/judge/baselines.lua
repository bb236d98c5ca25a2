-- km.judge.baselines — PyTorch eager and torch.compile on the timed shape, and the timings
-- that do not change between runs (the CUDA reference's, the starter's).
--
-- Owns: on a task state, st.baselines (shape key -> { eager, compile, errors }) and
-- st.wants_torch. Each timing is read from the disk cache (km.task.baseline: once per task
-- content, shape, precision, GPU, torch version and mode) or measured here with the
-- candidate's protocol (fresh inputs, poisoned outputs, cold L2), and kept there. A
-- KernelBench problem's eager model is its reference (st.prob); a task with a CUDA
-- reference and a reference.py loads that as a second model (Judge:torch_model), with the
-- task's own input and output names.
--
--   option        default                           meaning
--   compile_mode  KM_COMPILE_MODE, km.task.kernelbench's  torch.compile's mode ("off": none)
--   eager         true                              false: no eager baseline for a CUDA reference
local timing = require "km.timing"
local task_mod = require "km.task"
local launch = require "km.judge.launch"
local timed = require "km.judge.timed"

local pairs, ipairs, tostring, pcall = pairs, ipairs, tostring, pcall

local M = {}
local Judge = {}
M.methods = Judge

-- The fields of a cached timing's key (km.task.baseline.key) for `sym`: what was timed (`source`:
-- the texts that decide it), the task's own task.lua (a problem file has none), the shape,
-- precision, GPU, the software that ran it (`torch`: torch's or NVRTC's version), `mode`
-- (which timing; the caller may set it later) and the timing protocol.
local function timing_key(self, st, sym, opts, source, torch, mode)
  local t = st.task
  return { source = source, task = t.dir and not t.reference.pytorch and task_mod.read_file(t.dir .. "/task.lua") or "",
    shape = task_mod.fmt_shape(sym), precision = t.reference.precision or "fp32",
    device = tostring(self.device.uuid or self.device.name), torch = torch, mode = mode,
    timing = timing.protocol_key(timed.time_opts(opts)) }
end

local function baseline_record(res, extra)
  local r = timed.summary(res)
  for k, x in pairs(extra or {}) do r[k] = x end
  return r
end

-- torch.compile of the model on a trial's buffers -> what its record adds | nil, why
-- (a compile that failed in every mode is kept, so no new worker spends minutes on it again;
-- not an interrupted or timed-out attempt)
local function compile_model(self, t, prob, sym, opts, mode, key_ok, key)
  -- where a precompiler compiles this run's tasks ahead (km.task.precompile), its result first
  local precompile = require "km.task.precompile"
  local pre = precompile.before_compile(precompile.entry(t, mode))
  local precompiled -- true: compiled ahead; false: the precompiler had it and failed
  if pre and pre.by == "precompiler" then precompiled = (pre.result and pre.result.ok) == true end
  local io, ref_in = self:trial_io(t, sym, (opts.seed_base or 1000) + 4242)
  local c, cerr, ccode = prob:compile(io, { mode = mode })
  self.pool:put_all(io); self.pool:put_all(ref_in)
  if not c then
    if key_ok and ccode == "COMPILE_FAILED" then require("km.task.baseline").put_unavailable(key, cerr) end
    return nil, cerr
  end
  return { mode = c.mode, asked = c.asked, failed = c.failed, compile_seconds = c.seconds,
    compile_cache_hits = c.fx_hits, compile_cache_misses = c.fx_misses, checked_against_eager = c.checked,
    precompiled = precompiled, precompile_wait_seconds = pre and pre.waited or nil }
end

-- One baseline (`which`: "eager" | "compile") measured on the model -> record | nil, why
local function measure_baseline(self, st, prob, which, sym, opts, mode, key_ok, key, version)
  local run = { torch = prob, variant = which, state = launch.fresh_state() }
  local extra, err
  if which == "compile" then extra, err = compile_model(self, st.task, prob, sym, opts, mode, key_ok, key) end
  local rec
  if not err then
    local res, status, text = self:time_run(st, run, sym, opts, false)
    if res then rec = baseline_record(res, extra) else err = tostring(status) .. ": " .. tostring(text) end
  end
  if not rec then return nil, err end
  rec.measured_at, rec.device_name, rec.torch = os.date("!%Y-%m-%dT%H:%M:%SZ"), self.device.name, version
  if key_ok then require("km.task.baseline").put(key, rec) end
  rec.cached = false
  return rec
end

-- The model, loaded when a baseline must be measured -> a function () -> model | nil, why
local function model_loader(self, st, kb)
  local prob, perr
  return function()
    if prob == nil and not perr then
      local okt, i = kb.available()
      if not okt then perr = "PyTorch is not available: " .. tostring(i)
      else
        local p, why = self:torch_model(st)
        if p then prob = p else perr = "the task's reference.py does not load: " .. tostring(why) end
      end
    end
    return prob, perr
  end
end

-- -> { eager = record?, compile = record?, errors = { eager = why?, compile = why? } } | nil
-- (no PyTorch reference). A record is the timing summary plus cached (true when read from
-- disk) and, for compile, mode (used), asked, failed (modes that did not compile, why) and
-- compile_seconds.
function Judge:baselines(st, sym, opts)
  local t = st.task
  local source = t.reference.pytorch and t.reference.source_text or t.reference.pytorch_text
  local baseline = require "km.task.baseline"
  local mode = baseline.compile_mode(opts.compile_mode)
  local want_eager = st.prob or opts.eager ~= false -- a problem's eager model is its reference
  if not source or not (want_eager or mode ~= "off") then return nil end
  local tk = task_mod.fmt_shape(sym)
  st.baselines = st.baselines or {}
  if st.baselines[tk] then return st.baselines[tk] end
  local out = { errors = {} }
  st.baselines[tk] = out
  st.wants_torch = true -- the task's PyTorch model is in use here (Judge:try_fast_reference)
  self:truth_check(st, "the baselines") -- measured on the model as loaded, whatever ran before
  st.truth_dirty = true                 -- and what they run may move its buffers
  local kb = require "km.task.kernelbench"
  -- the records are looked up before the model is loaded: torch's version is read without
  -- importing torch, so baselines kept on disk do not wait for an import started ahead
  local version, verr = kb.version()
  if not version then out.errors.eager = "PyTorch is not available: " .. tostring(verr) return out end
  local model = model_loader(self, st, kb)
  local parts = timing_key(self, st, sym, opts, source, tostring(version))
  local list, held = {}, false
  if want_eager then list[#list + 1] = "eager" end
  if mode ~= "off" then list[#list + 1] = "compile" end
  for _, which in ipairs(list) do
    parts.mode = which == "eager" and "eager" or "compile:" .. mode
    local key_ok, key = pcall(baseline.key, parts)
    local rec, gone
    if key_ok then rec, gone = baseline.get(key) end
    if rec then
      rec.cached = true
    elseif gone then
      out.errors[which] = gone .. " (kept from an earlier run: " .. tostring(baseline.dir()) .. "/" .. key .. ".json)"
    else
      local prob, perr = model()
      if not prob then
        out.errors[which] = perr
      else
        if self.on_hold then self.on_hold(which) held = true end -- one-time set-up: a pool gives it its own time
        local err
        rec, err = measure_baseline(self, st, prob, which, sym, opts, mode, key_ok, key, version)
        if not rec then out.errors[which] = err end
      end
    end
    out[which] = rec
  end
  if held then self.on_hold(nil) end
  return out
end

-- A timing that does not change between runs (the CUDA reference's, the starter's), read
-- from the baselines' disk cache (km.task.baseline) or measured by `measure` and kept there,
-- keyed by what was timed (`source`: the texts that decide it), the task, shape, precision,
-- GPU, NVRTC and the timing protocol. -> summary record | nil, status, message
function Judge:cached_timing(st, sym, opts, what, source, measure)
  local baseline = require "km.task.baseline"
  local parts = timing_key(self, st, sym, opts, source, "nvrtc " .. tostring(self.device.nvrtc), what)
  local okk, key = pcall(baseline.key, parts)
  local rec = okk and baseline.get(key) or nil
  if rec then rec.cached = true return rec end
  local res, status, text = measure()
  if not res then return nil, status, text end
  rec = baseline_record(res)
  rec.measured_at = os.date("!%Y-%m-%dT%H:%M:%SZ")
  if okk then baseline.put(key, rec) end
  rec.cached = false
  return rec
end

return M
