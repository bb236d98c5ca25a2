-- km.task.precompile — torch.compile baselines compiled ahead, beside the judge.
--
-- With empty caches, a run's torch.compile baselines spend most of their time compiling
-- (dynamo's trace, inductor's code, Triton's compiler): work on the CPU while the GPU waits.
-- A pool whose tasks will want a torch.compile baseline starts one precompiler process (M.start;
-- km.serve.pool does, for kmrun STRATEGY and kmrun sweep). It loads each task's PyTorch model on the
-- meta device and compiles it into inductor's caches (kb_bridge.precompile: parameters and
-- inputs get memory and no values, the compiled graph never runs, and a compile that would
-- run work on the GPU is abandoned), in the tasks' order, while the workers judge. The judge
-- that reaches a task's compile baseline then compiles with inductor's caches warm. Its one
-- GPU work is torch's first compile in a process (24 small copies on the H200), which it does
-- on a one-line function as it starts (docs/pytorch.md, "Compiled ahead").
--
--   local pre = require "km.task.precompile"
--   local list = pre.entries(tasks, args)           -- what a run will compile (km.run.setup)
--   local h = pre.start(list, { env = env })        -- the process; h.dir goes to the workers
--   pre.before_compile(pre.entry(task, mode))       -- in the judge (KM_PRECOMPILE_DIR)
--   pre.stop(h)
--
-- Who compiles a task is settled by a claim, a file created exclusively (sys.create) in the
-- run's folder: the precompiler claims a task before compiling it and skips one claimed; the
-- judge claims it before compiling, and where the precompiler has it, waits for its result
-- (a .done file, or the process gone, or WAIT_S) and then compiles. Nothing here decides a
-- timing or a verdict: a task the precompiler did not reach or could not compile is compiled
-- by the judge, as without it. What it compiled is kept as a record in the baselines' folder,
-- so that a later run with the same caches does not start it again.
local jc = require "km.jsoncache"
local json = require "km.json"
local sys = require "km.sys"

local M = {}

local fmt = string.format
local type, ipairs, tostring = type, ipairs, tostring

-- The torch.compile modes whose compiling runs nothing on the GPU (kb_bridge's PRECOMPILE_MODES).
M.MODES = { default = true, ["reduce-overhead"] = true }
M.WAIT_S = 300       -- the longest a judge waits for the precompiler's result on one task
M.POLL_S = 0.02
M.PROTOCOL = 1

local function wall() return require("km.timing").wall() end

-- What a task's torch.compile baseline compiles, as kb.load loads it for the judge
-- (km.judge: a problem file at its precision; a task's reference.py with the task's names),
-- and its key; nil where the task has no PyTorch model or mode compiles on the GPU.
function M.entry(t, mode)
  local r = type(t) == "table" and t.reference or nil
  if not r or not M.MODES[mode or ""] then return nil end
  local e
  if r.pytorch then
    e = { path = r.pytorch, precision = r.precision or "fp32", text = r.source_text }
  elseif r.pytorch_file then
    local ins, outs = {}, {}
    for i, s in ipairs(t.inputs or {}) do ins[i] = s.name end
    for i, s in ipairs(t.outputs or {}) do outs[i] = s.name end
    e = { path = r.pytorch_file, precision = "fp32", text = r.pytorch_text, names = { inputs = ins, outputs = outs } }
  else
    return nil
  end
  if type(e.text) ~= "string" then return nil end
  e.mode = mode
  local names = e.names and (table.concat(e.names.inputs, ",") .. ";" .. table.concat(e.names.outputs, ",")) or ""
  e.key = jc.key("precompile", M.PROTOCOL, { path = e.path, text = e.text, precision = e.precision, names = names, mode = mode },
    { "path", "text", "precision", "names", "mode" })
  e.text = nil
  return e
end

-- The record kept once an entry compiled (torch's version too: a new torch compiles anew).
local function done_key(e, version)
  return jc.key("precompiled", M.PROTOCOL, { entry = e.key, torch = tostring(version) }, { "entry", "torch" })
end

-- The entries a run over tasks will want compiled (a: its parsed options: baselines,
-- compile_mode), without those an earlier run compiled with this torch and these caches.
function M.entries(tasks, a)
  local baseline = require "km.task.baseline"
  -- the mode the run's judges will use ("off" where no compile baseline is wanted)
  local mode = baseline.compile_mode(baseline.judge_opts(a or {}).compile_mode)
  if not M.MODES[mode] then return {} end
  local version = require("km.task.kernelbench").version()
  if not version then return {} end
  local dir = baseline.dir()
  local out, seen = {}, {}
  for _, t in ipairs(tasks or {}) do
    local e = M.entry(t, mode)
    if e and not seen[e.key] and not (dir and jc.get(dir, done_key(e, version))) then
      seen[e.key] = true
      out[#out + 1] = e
    end
  end
  return out
end

-- Whether process pid still runs (not gone, not a zombie left for its parent to reap).
local function alive(pid)
  local f = pid and io.open("/proc/" .. tostring(pid) .. "/stat", "rb")
  if not f then return false end
  local s = f:read("a") or ""
  f:close()
  local state = s:match("^%d+ %b() (%a)")
  return state ~= nil and state ~= "Z" and state ~= "X"
end

local function claim(dir, key, who)
  local ok, _, code = sys.create(dir .. "/" .. key .. ".claim", who)
  if ok then return true end
  if code == "EXISTS" then return false end
  return nil -- the folder is gone: nobody to coordinate with
end

local function read_json(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return json.decode(s or "")
end

-- In the judge, before it compiles a task's torch.compile baseline (e: M.entry). Without a
-- precompiler (no KM_PRECOMPILE_DIR) it returns nil at once. Else it claims the task; where
-- the precompiler claimed it first, it waits for its result. -> nil | { by = "judge" |
-- "precompiler", waited = seconds, result = the precompiler's { ok, seconds, why } }
function M.before_compile(e, dir, opts)
  dir = dir or os.getenv("KM_PRECOMPILE_DIR")
  if not e or not dir or dir == "" then return nil end
  local c = claim(dir, e.key, "judge")
  if c == nil then return nil end
  if c then return { by = "judge", waited = 0 } end
  local w0, limit = wall(), (opts and opts.wait_s) or M.WAIT_S
  local pf = io.open(dir .. "/pid", "rb")
  local pid = pf and tonumber(pf:read("a") or "")
  if pf then pf:close() end
  local done = dir .. "/" .. e.key .. ".done"
  while not sys.realpath(done) do -- nil until the precompiler renames its result there
    if (pid and not alive(pid)) or wall() - w0 > limit then break end
    sys.sleep(M.POLL_S)
  end
  return { by = "precompiler", waited = wall() - w0, result = read_json(done) }
end

----------------------------------------------------------------------------------------
-- the process

-- Compiles one entry (the precompiler's work). -> result table (ok, seconds, why, code)
local function compile_one(kb, e, device)
  local prob, err, code = kb.load(e.path, { device = "meta", precision = e.precision, names = e.names })
  if not prob then return { ok = false, why = tostring(err), code = code } end
  local r, perr, pcode = prob:precompile { mode = e.mode, device = device }
  prob:release()
  if not r then return { ok = false, why = tostring(perr), code = pcode } end
  return { ok = true, seconds = r.seconds, fx_misses = r.fx_misses, fx_hits = r.fx_hits }
end

-- The precompiler: kmrun <libdir>/km/task/precompiler.lua DIR, with DIR/plan.json the entries
-- (M.start). Each result goes to DIR/<key>.done, a line per entry to DIR/log. -> exit status
function M.main(dir, device)
  local plan = dir and read_json(dir .. "/plan.json")
  if type(plan) ~= "table" then io.stderr:write("km.task.precompile: no plan in ", tostring(dir), "\n") return 2 end
  local kb = require "km.task.kernelbench"
  local ok, why = kb.available()
  if not ok then io.stderr:write("km.task.precompile: ", tostring(why), "\n") return 3 end
  local version = kb.version()
  local bdir = require("km.task.baseline").dir()
  local log = io.open(dir .. "/log", "ab") -- a line per entry (stdout is the pool's pipe)
  -- torch's one-time set-up for compiling copies to the GPU (24 small copies on the H200):
  -- done first, as the workers start, not inside a task's compile
  local w, werr = kb.precompile_warm_up { device = device or plan.device or "cuda" }
  if log then log:write(w and fmt("warmed up in %.2f s\n", w.seconds) or ("warm-up failed: " .. tostring(werr) .. "\n")) end
  for _, e in ipairs(plan.entries or {}) do
    if claim(dir, e.key, "precompiler") then
      local okc, res = pcall(compile_one, kb, e, device or plan.device or "cuda")
      if not okc then res = { ok = false, why = tostring(res) } end
      if res.ok and bdir then jc.put(bdir, done_key(e, version), { entry = e.path, mode = e.mode, seconds = res.seconds }) end
      local f = io.open(dir .. "/" .. e.key .. ".tmp", "wb")
      if f then
        f:write(json.encode(res))
        f:close()
        os.rename(dir .. "/" .. e.key .. ".tmp", dir .. "/" .. e.key .. ".done")
      end
      if log then
        log:write(fmt("%s %s %.2f s%s\n", res.ok and "compiled" or "not compiled", e.path, res.seconds or 0,
          res.ok and "" or (": " .. tostring(res.why))))
        log:flush()
      end
    end
  end
  if log then log:close() end
  return 0
end

-- Starts the precompiler over entries (M.entries) in a folder of its own, as km.proc starts
-- a GPU worker: a clean environment (km.proc's clean_env) with opts.env over it — a pool
-- gives its workers' (Pool:_env), so that both see the same caches. opts: env (KM_DEVICE
-- among them: its GPU), device (where the graphs will run: "cuda", the default, or "cpu").
-- -> handle { dir, proc, pid, entries } | nil, why
function M.start(entries, opts)
  if type(entries) ~= "table" or #entries == 0 then return nil, "nothing to compile" end
  opts = opts or {}
  local base = os.getenv("XDG_RUNTIME_DIR")
  if not base or base == "" then base = os.getenv("TMPDIR") or "/tmp" end
  local dir = fmt("%s/kmrun-precompile-%d-%d-%d", base, sys.uid(), sys.pid(), math.random(1, 1 << 30))
  local okd, derr = sys.mkdir(dir, 448)
  if not okd then return nil, tostring(derr) end
  local list = {}
  for i, e in ipairs(entries) do
    list[i] = { key = e.key, path = e.path, precision = e.precision, mode = e.mode, names = e.names }
  end
  local f = io.open(dir .. "/plan.json", "wb")
  if not f then sys.rmtree(dir) return nil, "cannot write " .. dir .. "/plan.json" end
  f:write(json.encode { entries = list, device = opts.device })
  f:close()
  local env = { KM_DEVICE = "0", KM_BASELINE_DIR = require("km.task.baseline").dir() }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  -- inductor's own compile workers share the CPUs with the judges and the NVRTC compilers
  -- (not in inductor's cache keys)
  env.TORCHINDUCTOR_COMPILE_THREADS = env.TORCHINDUCTOR_COMPILE_THREADS or tostring(math.max(1, (sys.cpu_count() or 2) // 4))
  local p, serr = require("km.proc").spawn({ package.km_exe, package.km_libdir .. "/km/task/precompiler.lua", dir },
    { env = env, clean_env = true, stderr = "null" })
  if not p then sys.rmtree(dir) return nil, tostring(serr) end
  local pid = p:pid()
  local pf = io.open(dir .. "/pid", "wb")
  if pf then pf:write(tostring(pid)) pf:close() end
  return { dir = dir, proc = p, pid = pid, entries = list }
end

-- How far it got: { entries, compiled, failed, running }.
function M.status(h)
  local s = { entries = #h.entries, compiled = 0, failed = 0, running = h.proc ~= nil and h.proc:alive() or false }
  for _, e in ipairs(h.entries) do
    local r = h.dir and read_json(h.dir .. "/" .. e.key .. ".done")
    if r and r.ok then s.compiled = s.compiled + 1 elseif r then s.failed = s.failed + 1 end
  end
  return s
end

-- Stops the precompiler (what it still compiles is left to the judges) and removes its folder.
function M.stop(h)
  if not h then return end
  if h.proc then h.proc:kill(); h.proc:wait(5000); h.proc = nil end
  if h.dir then sys.rmtree(h.dir) h.dir = nil end
end

return M
