-- km.feedback — the text a verdict shows the model: what went wrong and what to look at.
--
-- Pure string building, no CUDA: the judge decides, this module words it. Kept apart so the
-- wording can be tuned (and tested) without touching the judge's logic.
local M = {}

local fmt, concat = string.format, table.concat
local tostring, tonumber, math = tostring, tonumber, math

-- "kernel.cu(12): error: ..." -> the log plus the offending source lines, numbered.
function M.compile(log, source, name)
  local lines, shown, out = {}, {}, { "The kernel does not compile. NVRTC says:", log }
  for l in (source .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  for n in log:gmatch("%((%d+)%): error") do
    n = tonumber(n)
    for m = math.max(1, n - 1), n do -- the line before often holds the real culprit
      if not shown[m] and lines[m] then
        shown[m] = true
        out[#out + 1] = fmt("%s line %d: %s", name, m, lines[m])
      end
    end
  end
  return concat(out, "\n")
end

local LAUNCH = {
  launch_error = "The launch failed: %s\nCheck the grid and block sizes against the device limits (at most 1024 threads per block), the shared memory you ask for (raise a kernel's limit with k.set_shared(name, bytes) above 48 KiB), and that the arguments match the kernel's parameters in number and type.",
  crashed = "The kernel crashed the GPU context: %s\nLook for out-of-range indices (check every index against its bound, including the last partial block), misaligned vector loads (float4 needs a 16-byte-aligned address), and uninitialised pointers.",
}

function M.launch(status, msg, where)
  return fmt(LAUNCH[status] or "%s", tostring(msg)) .. "\n(at " .. where .. ")"
end

function M.out_of_bounds(what, where)
  return "The kernel wrote outside a buffer: " .. what .. " (at " .. where ..
    "). Guard every store with its bound; the last block is usually partial."
end

function M.inputs_modified(name, where, out_name)
  return fmt("The kernel modified the input '%s' (at %s). Inputs are read-only: write results only to the outputs (%s), or to k.scratch buffers.",
    name, where, out_name)
end

local function coords(index, dims)
  if #dims == 0 then return "" end -- a 0-d output, or a shape not to be named (a held-out one)
  local c = {}
  for i = #dims, 1, -1 do
    c[i] = index % dims[i]
    index = index // dims[i]
  end
  return "[" .. concat(c, ", ") .. "]"
end

-- What a mismatch on verify's precision trial adds (rel_l2: its norm-wise relative error, or
-- nil where the elementwise failure was NaN, infinity or unwritten).
function M.precision(rel_l2)
  return "\nThis trial draws zero-mean inputs, so sums cancel and every operand's low bits show in the result"
    .. (rel_l2 and fmt(" (norm-wise relative error %.3g; fp32 arithmetic in any summation order stays under 5e-5)", rel_l2) or "")
    .. ". The task is fp32: compute with fp32 operands (fp16, TF32 or bf16 operands, as tensor-core MMA takes them, are off by about 3e-4 relative).\n"
end

-- A failed comparison r (km.compare's report) of output `name` -> status, text.
-- later: what earlier trials passed ("shape", "seed", or nil), for the hint.
function M.mismatch(name, r, tol, dims, where, later)
  local status, head
  -- a timed call's check reads a sample of the lines: its counts are of the elements read
  local of = r.compared and r.compared < r.n and fmt("%d (a sample of the %d)", r.compared, r.n) or tostring(r.n)
  if (r.unwritten or 0) > 0 then
    status = "mismatch"
    head = fmt("%d of %s elements of '%s' were never written.", r.unwritten, of, name)
  elseif r.nan + r.inf > 0 and r.mismatches <= r.nan + r.inf then
    -- every wrong element is NaN/Inf; with finite wrong values too, it is a mismatch
    status = "nan_inf"
    head = fmt("'%s' has %d NaN and %d Inf values where the reference is finite.", name, r.nan, r.inf)
  else
    status = "mismatch"
    head = fmt("'%s' differs from the reference in %d of %s elements (max abs error %.3g, max rel error %.3g; tolerance atol %g, rtol %g).",
      name, r.mismatches, of, r.max_abs, r.max_rel, tol.atol, tol.rtol)
  end
  local lines = { head .. " At " .. where .. ":" }
  local ex = r.examples or {}
  for i = 1, math.min(#ex, 5) do
    local e = ex[i]
    lines[#lines + 1] = fmt("  %s%s (flat %d): got %s, want %s", name, coords(e.index, dims), e.index, tostring(e.got), tostring(e.want))
  end
  if later == "shape" then
    lines[#lines + 1] = "Earlier shapes passed: check boundary handling for this size (partial blocks, sizes not a multiple of the tile)."
  elseif later == "seed" then
    lines[#lines + 1] = "Earlier seeds passed on this shape: suspect a race (a missing __syncthreads), state kept between launches, or reads of memory nothing wrote."
  elseif later == "timed" then
    lines[#lines + 1] = "Every verification run passed, but a timed run did not: the kernel must do the whole computation on every call (no state kept between launches, no work skipped when the same buffers come back; a problem's weights change between timed calls too, so nothing derived from them may be kept)."
  end
  return status, concat(lines, "\n")
end

function M.too_fast(ms, bytes, mem_ms, gbs)
  return fmt("The kernel ran in %.4f ms, faster than this GPU can move the task's %d bytes (%.4f ms at %.0f GB/s). It cannot be doing the work: results may be cached, or work may run outside the timed stream.",
    ms, bytes, mem_ms, gbs)
end

----------------------------------------------------------------------------------------
-- speedups, each named with the baseline it was divided by

-- What a verdict's speedup_over can name: the words a model or a user reads, and where the
-- verdict holds that baseline's time (v.timing[timing]). The one place this is spelled:
-- feedback, episode lines, run summaries, kmrun eval and kmrun report ask here.
M.BASELINES = {
  pytorch_eager = { name = "PyTorch eager", short = "eager", over = "over eager", timing = "eager" },
  cuda_reference = { name = "CUDA reference", short = "CUDA ref", over = "over the CUDA reference", timing = "reference" },
}

-- The row of v's speedup baseline and that baseline's median ms (from the verdict that
-- holds the speedup); nil when the verdict has no speedup.
function M.baseline(v)
  local b = M.BASELINES[v and v.speedup_over or ""]
  if not b or not v.speedup then return nil end
  local t = v.timing and v.timing[b.timing]
  return b, t and t.median
end

-- The words for a speedup over what `over` names (a speedup_over value): "over eager".
function M.over(over)
  local b = M.BASELINES[over or ""]
  return b and b.over or "over an unnamed baseline"
end

-- "0.8100 ms; PyTorch eager 1.0200 ms; speedup 1.26x over eager", then the other
-- baselines the verdict timed beside it, each with its own ratio.
function M.speed(v)
  local t = v.timing or {}
  local c = t.candidate and t.candidate.median
  if not c then return "not timed" end
  local b, base_ms = M.baseline(v)
  local out = {}
  if b and base_ms then
    out[1] = fmt("%.4f ms; %s %.4f ms; speedup %.2fx %s", c, b.name, base_ms, v.speedup, M.over(v.speedup_over))
  elseif b then
    out[1] = fmt("%.4f ms; speedup %.2fx %s", c, v.speedup, M.over(v.speedup_over))
  else
    out[1] = fmt("%.4f ms; no baseline was timed, so no speedup", c)
  end
  local beside = {}
  if v.speedup_compile and t.compile then
    beside[#beside + 1] = fmt("torch.compile%s %.4f ms: %.2fx", v.compile_mode and ("[" .. v.compile_mode .. "]") or "",
      t.compile.median, v.speedup_compile)
  end
  if v.speedup_cuda_reference and v.speedup_over ~= "cuda_reference" and t.reference then
    beside[#beside + 1] = fmt("CUDA reference %.4f ms: %.2fx", t.reference.median, v.speedup_cuda_reference)
  end
  if v.speedup_baseline and t.baseline then
    beside[#beside + 1] = fmt("starter %.4f ms: %.2fx", t.baseline.median, v.speedup_baseline)
  end
  if #beside > 0 then out[2] = " (" .. concat(beside, "; ") .. ")" end
  return concat(out)
end

-- A speedup in a column: "1.26x eager"; "-" when there is none.
function M.speedup_cell(v)
  local b = M.BASELINES[v and v.speedup_over or ""]
  if not (v and v.speedup) then return "-" end
  return fmt("%.2fx %s", v.speedup, b and b.short or "?")
end

function M.correct(nshapes, nseeds, v)
  return fmt("Correct on %d shapes x %d seeds. %s; %.0f%% of the roofline bound.",
    nshapes, nseeds, M.speed(v), 100 * ((v.roofline or {}).fraction or 0))
end

return M
