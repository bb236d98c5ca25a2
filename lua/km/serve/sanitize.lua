-- km.serve.sanitize — judge a candidate under NVIDIA's compute-sanitizer: memcheck, then racecheck.
--
--   local eval = require "km.serve.pool"
--   local v, why, code = eval.sanitize(task, cand, { gpu = 0, timeout = 600 })
--   -- v.status: "out_of_bounds" (memcheck: an invalid global/shared/local access),
--   --           "race" (racecheck: a shared-memory hazard), else the usual verdict
--   -- v.sanitizer = { memcheck = { findings, candidate_findings, summary, text }, racecheck = ... }
--   -- nil, why, "NO_SANITIZER" | "NO_GPU" when it cannot run
--
-- Each tool runs in its own GPU worker (km.serve.pool's pool with `wrap`, the argv prefix), timing
-- off, one seed. The worker sees KM_SANITIZE=<tool>: its buffers then have no guard zones
-- (memcheck knows only allocation bounds: a guard zone would hide a read past the end) and
-- kernels carry line info. Findings come from the sanitizer's log file, never its exit code:
-- only findings in the candidate's own kernels decide the status; the rest (the reference,
-- kmrun's own kernels) are kept in v.sanitizer for whoever looks. The text shown to the model
-- is the first findings, cut. Pure functions (find, argv, parse, kernel_names, apply) are
-- exported for tests and for strategies that run the tool themselves.
local M = {}

local fmt, concat = string.format, table.concat
local ipairs, pairs, type, tostring, tonumber = ipairs, pairs, type, tostring, tonumber

M.TOOLS = { "memcheck", "racecheck" }
M.PRINT_LIMIT = 20   -- findings the sanitizer prints per run
M.SHOWN = 1500       -- bytes of findings shown in the feedback
M.TIMEOUT = 600      -- seconds per tool run (a sanitized run is 10-100x slower)

local function is_file(path)
  local f = io.open(path, "rb")
  if not f then return false end
  f:close()
  return true
end

-- The compute-sanitizer to use: opts.sanitizer, else the first on PATH, else
-- $CUDA_HOME/bin, else /usr/local/cuda/bin. -> path | nil, why, "NO_SANITIZER"
function M.find(opts)
  opts = opts or {}
  if opts.sanitizer then
    if is_file(opts.sanitizer) then return opts.sanitizer end
    return nil, "compute-sanitizer not found at " .. opts.sanitizer, "NO_SANITIZER"
  end
  local tried = {}
  local getenv = opts.getenv or os.getenv
  for dir in ((getenv("PATH") or "") .. ":"):gmatch("([^:]*):") do
    if dir ~= "" then tried[#tried + 1] = dir end
  end
  local cuda_home = getenv("CUDA_HOME")
  if cuda_home and cuda_home ~= "" then tried[#tried + 1] = cuda_home .. "/bin" end
  tried[#tried + 1] = "/usr/local/cuda/bin"
  for _, dir in ipairs(tried) do
    local p = dir .. "/compute-sanitizer"
    if is_file(p) then return p end
  end
  return nil, "compute-sanitizer not found on PATH, in $CUDA_HOME/bin (" .. tostring(cuda_home or "CUDA_HOME unset") ..
    ") or /usr/local/cuda/bin: install the CUDA toolkit's compute-sanitizer or set CUDA_HOME", "NO_SANITIZER"
end

-- The argv prefix a worker runs under for `tool`, logging to `log`. memcheck pads every
-- allocation (--padding): without it a read just past a small buffer lands in the next
-- allocation, which memcheck counts as valid.
function M.argv(exe, tool, log, print_limit)
  local argv = { exe, "--tool", tool, "--log-file", log, "--print-limit", tostring(print_limit or M.PRINT_LIMIT),
    "--error-exitcode", "99", "--report-api-errors", "no", "--show-backtrace", "device" }
  if tool == "memcheck" then argv[#argv + 1] = "--padding"; argv[#argv + 1] = "1024" end
  return argv
end

-- The names of the kernels a CUDA source defines (extern "C" __global__ ... name(...)).
function M.kernel_names(source)
  local names = {}
  for decl in tostring(source or ""):gmatch("__global__([^{;]*)") do
    decl = decl:gsub("__launch_bounds__%s*%b()", ""):gsub("__attribute__%s*%b()", ""):gsub("__maxnreg__%s*%b()", "")
    local name = decl:match("([%a_][%w_]*)%s*%(")
    if name then names[name] = true end
  end
  return names
end

-- What a finding's header says it is.
local function kind_of(head)
  if head:find("Race reported", 1, true) or head:find("^%a*:? *Race") then return "race" end
  if head:find("^Invalid __%a+__ %a+") or head:find("^Invalid %a+ %a+ of size")
    or head:find("^Out%-of%-range") or head:find("^Misaligned") or head:find("^Invalid %a*%s*[Aa]ddress") then
    return "out_of_bounds"
  end
  return "other"
end

-- Splits a sanitizer log into findings: a finding is a line "========= Head" followed by
-- its indented lines ("=========     at ..."). -> { findings = { { kind, text, candidate } },
-- summary = "ERROR SUMMARY: ..." or nil }. `kernels` (a set of names): a finding is the
-- candidate's when its text names one of them as a whole word.
function M.parse(text, kernels)
  local out, cur = { findings = {} }, nil
  for line in (tostring(text or "") .. "\n"):gmatch("([^\n]*)\n") do
    local body = line:match("^=========(.*)$")
    if body then
      local indented = body:match("^%s%s%s+(%S.*)$")
      local head = body:match("^%s?(%S.*)$")
      if indented and cur then
        cur.lines[#cur.lines + 1] = "    " .. indented
      elseif head and (head:find("SUMMARY:", 1, true)) then
        out.summary = head
        cur = nil
      elseif head and not head:find("^COMPUTE%-SANITIZER") and not head:find("^Target application") then
        cur = { kind = kind_of(head:gsub("^Error: ", ""):gsub("^Warning: ", "")), lines = { head } }
        out.findings[#out.findings + 1] = cur
      end
    end
  end
  for _, f in ipairs(out.findings) do
    f.text = concat(f.lines, "\n")
    f.lines = nil
    f.candidate = false
    for name in pairs(kernels or {}) do
      if f.text:find("%f[%w_]" .. name .. "%f[^%w_]") then f.candidate = true break end
    end
  end
  return out
end

local STATUS_OF = { memcheck = "out_of_bounds", racecheck = "race" }
local WHAT = {
  out_of_bounds = "compute-sanitizer memcheck found invalid memory accesses in your kernel (%d finding%s). Check every index against its buffer's size, including reads: a read one element past the end is a bug even when the result looks right.",
  race = "compute-sanitizer racecheck found shared-memory races in your kernel (%d finding%s). Threads read shared memory another thread writes without a __syncthreads() between (or write it while others still read): put a barrier between every write phase and the reads that depend on it, in every iteration of a reduction loop.",
}

-- Shows findings (the candidate's first) within `limit` bytes.
local function shown(findings, limit)
  local parts, n = {}, 0
  for _, f in ipairs(findings) do
    if n + #f.text + 1 > limit then
      parts[#parts + 1] = fmt("(%d more not shown)", #findings - #parts)
      break
    end
    parts[#parts + 1] = f.text
    n = n + #f.text + 1
  end
  return concat(parts, "\n")
end

-- One tool's parsed log -> the record kept in the verdict.
function M.record(tool, parsed)
  local mine, all = {}, {}
  local want = STATUS_OF[tool]
  for _, f in ipairs(parsed.findings) do
    if f.kind ~= "other" then all[#all + 1] = f end
    if f.candidate and f.kind == want then mine[#mine + 1] = f end
  end
  return { tool = tool, findings = #all, candidate_findings = #mine, summary = parsed.summary,
    text = shown(mine, M.SHOWN), other = #all > #mine and shown(all, M.SHOWN) or nil, status = #mine > 0 and want or nil }
end

-- Folds the tools' records into the verdict of the first run: the first tool with findings
-- in the candidate's kernels sets the status and leads the feedback.
function M.apply(v, records)
  v.sanitizer = {}
  local found
  for _, r in ipairs(records) do
    v.sanitizer[r.tool] = r
    if r.status and not found then found = r end
  end
  if found then
    local previous = v.status
    v.status = found.status
    local n = found.candidate_findings
    -- what the run itself said helps (a mismatch a race explains), unless it is the crash
    -- memcheck causes by stopping the kernel at the bad access
    local said = previous ~= "correct" and previous ~= "crashed" and v.feedback
    v.feedback = fmt(WHAT[found.status], n, n == 1 and "" or "s") .. "\n" .. found.text ..
      (said and ("\nThe run under the sanitizer also said (" .. previous .. "): " .. said) or "")
    v.sanitizer.previous_status = previous
  else
    local ran = {}
    for _, r in ipairs(records) do ran[#ran + 1] = r.tool end
    v.feedback = (v.feedback or "") .. "\ncompute-sanitizer (" .. concat(ran, ", ") .. ") found no problem in the candidate's kernels."
  end
  return v
end

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a") or ""
  f:close()
  return s
end

-- Judges under each tool (eval: the km.serve.pool module). opts: gpu (0), timeout (600 s per
-- tool), tools (M.TOOLS), sanitizer (a path), seeds (1), env (more worker environment).
function M.run(eval, task, cand, opts)
  opts = opts or {}
  local exe, why, code = M.find(opts)
  if not exe then return nil, why, code end
  local kernels = M.kernel_names(cand.source)
  local records, first = {}, nil
  for _, tool in ipairs(opts.tools or M.TOOLS) do
    local log = os.tmpname()
    local env = { KM_SANITIZE = tool }
    for k, x in pairs(opts.env or {}) do env[k] = x end
    local pool, perr = eval.pool { gpus = { opts.gpu or 0 }, timeout = opts.timeout or M.TIMEOUT, warm = false,
      wrap = M.argv(exe, tool, log, opts.print_limit), env = env, startup_timeout = opts.startup_timeout or 300 }
    if not pool then
      local head = read_all(log):sub(1, 2000)
      os.remove(log)
      return nil, fmt("compute-sanitizer %s: the GPU worker did not start: %s%s", tool, tostring(perr),
        head ~= "" and ("\n" .. head) or ""), "NO_GPU"
    end
    local v = pool:eval(task, cand, { seeds = opts.seeds or 1, timing = false, timeout = opts.timeout or M.TIMEOUT, lineinfo = true })
    pool:close() -- the worker exits: the log is complete
    local rec = M.record(tool, M.parse(read_all(log), kernels))
    os.remove(log)
    rec.verdict_status = v.status
    records[#records + 1] = rec
    first = first or v
    -- nothing to run (it did not build), or memcheck already convicted it
    if rec.status or v.status == "compile_error" or v.status == "load_error" then break end
  end
  return M.apply(first, records)
end

return M
