-- km.run.prompt — prompts from tasks, candidates from model replies, feedback from verdicts.
--
--   local messages = prompt.implement(task, { forms = { "description", "math" } })
--   local cand, why = prompt.extract(reply.content)      -- { source, launch } | nil, message
--   prompt.append_feedback(messages, reply, verdict, guides)
--
-- Which spec forms a prompt shows (description, math, reference program, or any mix) is
-- the strategy's choice; the interface section (inputs, outputs, shapes, tolerance) is
-- always there, since a candidate cannot be judged without it.
local nvrtc = require "km.nvrtc"
local sandbox = require "km.sandbox"
local task_mod = require "km.task"
local context = require "km.run.context"
local statuses = require "km.statuses"

local fmt, concat, insert = string.format, table.concat, table.insert
local ipairs, pairs, type, tostring = ipairs, pairs, type, tostring

local M = {}

M.FORMS = { description = true, math = true, reference = true }

local SYSTEM = [[
You write CUDA kernels for NVIDIA GPUs. An answer is a candidate made of two parts:

1. kernel.cu, in a ```cuda block: one or more `extern "C" __global__` kernels, compiled
   with NVRTC (device code only: no host code, no <stdio.h>; <cuda_fp16.h>, <cuda_bf16.h>
   and <stdint.h> are available). Tunable constants go in macros guarded by #ifndef.
2. launch.lua, in a ```lua block: a Lua function that launches the kernels in order:

       return function(k, io, s)
         local block = 256
         k.my_kernel{ grid = k.cdiv(s.n, block), block = block }(io.x, io.y, s.n)
       end

   `k.<kernel>{ grid, block, shared }(args...)` launches a kernel (grid and block may be
   {x, y, z}); buffers pass as pointers, numbers convert to the declared parameter types.
   `io.<name>` are the task's input and output buffers, `s` its shape symbols.
   `k.scratch(dtype, shape)` gives temporary device memory, `k.cdiv(a, b)` is ceiling
   division, `k.params` holds tunable values, `k.device` the GPU's limits, and
   `k.set_shared(kernel, bytes)` allows more than 48 KiB of dynamic shared memory.
   The function runs sandboxed (no io, os, require) and must not choose streams.

The candidate is checked on several shapes (including sizes like 1 and primes) and
seeds against a reference, with the outputs pre-filled with NaN, guard zones around every
buffer and the inputs checksummed; then it is timed against the reference. Give exactly
one ```cuda block and one ```lua block.]]

function M.system() return SYSTEM end

-- The interface: inputs and outputs, shapes, tolerance.
function M.interface(t)
  local out = {}
  local function io_line(io, role)
    local dims = {}
    for i, d in ipairs(io.shape) do dims[i] = tostring(d) end
    local init = ""
    if role == "input" and io.init then
      init = fmt(" (test data: %s %s..%s)", io.init[1], tostring(io.init[2]), tostring(io.init[3]))
    end
    return fmt("- %s `%s`: %s[%s], row-major%s", role, io.name, io.dtype, concat(dims, ", "), init)
  end
  for _, io in ipairs(t.inputs) do
    -- a problem file's parameters and buffers are the model's state_dict (io.fc_weight)
    insert(out, io_line(io, io.role == "parameter" and "parameter" or "input"))
    if io.role == "parameter" and io.key then out[#out] = out[#out] .. fmt(" (the model's `%s`)", io.key) end
  end
  for _, io in ipairs(t.outputs) do insert(out, io_line(io, "output")) end
  local shapes = {}
  for i, s in ipairs(t.shapes) do
    -- a problem file's own sizes (number inputs, if any, in s); its held-out shape is
    -- verified but never shown (docs/tasks.md, "The held-out shape")
    if not (t.heldout and t.heldout.shape == i) then
      local text = next(s) and task_mod.fmt_shape(s) or "the sizes above"
      shapes[#shapes + 1] = text .. (i == 1 and " (timed)" or "")
    end
  end
  insert(out, "- shapes checked: " .. concat(shapes, "; "))
  local tols = {}
  for dt, tol in pairs(t.tolerance) do tols[#tols + 1] = fmt("%s atol %g rtol %g", dt, tol.atol, tol.rtol) end
  table.sort(tols)
  insert(out, "- tolerance: " .. concat(tols, "; "))
  return concat(out, "\n")
end

-- The reference form: a problem file's PyTorch program (KernelBench's form: the model's
-- forward on its inputs; its parameters are in io under their state_dict names), or the
-- task's CUDA reference with its launch code.
local function reference_text(t, heading)
  local r = t.reference
  if r.pytorch then
    local scalars = {}
    for _, k in ipairs(t.scalars or {}) do scalars[#scalars + 1] = "`s." .. k .. "`" end
    table.sort(scalars)
    local sizes, is_scalar = {}, {}
    for _, k in ipairs(t.scalars or {}) do is_scalar[k] = true end
    if t.scalars then
      for k in pairs(t.shapes[1] or {}) do if not is_scalar[k] then sizes[#sizes + 1] = "`s." .. k .. "`" end end
    end
    table.sort(sizes)
    return heading .. " (PyTorch, KernelBench's form; it defines the expected output)\n```python\n" ..
      (r.source_text or "") .. "\n```\nThe model's inputs, parameters and outputs are the buffers in `io` listed " ..
      "under Interface" .. (#scalars > 0 and ("; its number inputs are " .. concat(scalars, ", ")) or "") ..
      (#sizes > 0 and ("; its sizes are " .. concat(sizes, ", ") .. " (read them: kernels are checked at other sizes too)") or "") .. "."
  end
  return heading .. "\n```cuda\n" .. r.source_text .. "\n```\n```lua\n" .. r.launch_text .. "\n```"
end

-- The task in the chosen spec forms.
function M.task_text(t, forms)
  forms = forms or { "description", "math" }
  local parts = { fmt("# Task %s (level %d, %s)", t.name, t.level, t.category) }
  local shown = 0
  for _, f in ipairs(forms) do
    if not M.FORMS[f] then error("prompt: unknown spec form '" .. tostring(f) .. "' (description, math, reference)", 2) end
    if f == "description" and t.description_text then
      insert(parts, "## Description\n" .. t.description_text)
      shown = shown + 1
    elseif f == "math" and t.math_text then
      insert(parts, "## Math\n" .. t.math_text)
      shown = shown + 1
    elseif f == "reference" then
      insert(parts, reference_text(t, t.reference.pytorch and "## Reference program" or
        "## Reference program (correct but slow; it defines the expected output)"))
      shown = shown + 1
    end
  end
  if shown == 0 then -- the requested forms are missing: fall back to the reference
    insert(parts, reference_text(t, "## Reference program"))
  end
  insert(parts, "## Interface\n" .. M.interface(t))
  return concat(parts, "\n\n")
end

-- [system, user] asking for a first candidate.
function M.implement(t, opts)
  opts = opts or {}
  local user = M.task_text(t, opts.forms) ..
    "\n\nWrite a correct and fast candidate for this task on " .. (opts.gpu or "an NVIDIA H200 (sm_90)") .. "."
  if opts.guides and #opts.guides > 0 then user = user .. "\n\n" .. M.render_guides(opts.guides) end
  return { { role = "system", content = SYSTEM }, { role = "user", content = user } }
end

function M.render_guides(guides)
  local out = { "## Guidance" }
  for _, g in ipairs(guides) do insert(out, "### " .. g.title .. "\n" .. g.text) end
  return concat(out, "\n\n")
end

----------------------------------------------------------------------------------------
-- extraction

local CUDA_TAGS = { cuda = true, cu = true, ["c++"] = true, cpp = true, c = true, cuh = true }

-- Every fenced block: { tag, body }.
function M.blocks(text)
  local list = {}
  for tag, body in (text or ""):gmatch("```([%w%+%-_]*)[^\n]*\n(.-)```") do
    list[#list + 1] = { tag = tag:lower(), body = body }
  end
  return list
end

local function is_cuda(b)
  if CUDA_TAGS[b.tag] then return true end
  return b.tag == "" and b.body:find("__global__", 1, true) ~= nil
end

local function is_lua(b)
  if b.tag == "lua" then return true end
  return b.tag == "" and b.body:find("return%s+function") ~= nil and not b.body:find("__global__", 1, true)
end

-- A model reply -> candidate { source, launch } or nil, a message to send back.
function M.extract(text, opts)
  opts = opts or {}
  if type(text) ~= "string" or text == "" then
    return nil, "Your reply was empty. Answer with one ```cuda block (kernel.cu) and one ```lua block (launch.lua)."
  end
  local cudas, luas = {}, {}
  for _, b in ipairs(M.blocks(text)) do
    if is_cuda(b) then insert(cudas, b.body) elseif is_lua(b) then insert(luas, b.body) end
  end
  if #cudas == 0 then
    return nil, "I found no ```cuda code block in your reply. Answer with one ```cuda block holding the extern \"C\" __global__ kernels and one ```lua block with the launch function."
  end
  if #cudas > 1 then
    local names = {}
    for i, src in ipairs(cudas) do
      local ks = {}
      for name in pairs(nvrtc.parse_kernels(src)) do ks[#ks + 1] = name end
      table.sort(ks)
      names[i] = fmt("block %d defines %s", i, #ks > 0 and concat(ks, ", ") or "no extern \"C\" kernel")
    end
    return nil, fmt("Your reply has %d ```cuda blocks (%s). Send exactly one kernel.cu: merge the kernels you want into a single block.", #cudas, concat(names, "; "))
  end
  local source = cudas[1]
  local kernels = nvrtc.parse_kernels(source)
  local knames = {}
  for name in pairs(kernels) do knames[#knames + 1] = name end
  table.sort(knames)
  if #knames == 0 then
    return nil, "kernel.cu defines no `extern \"C\" __global__` kernel. Declare each kernel as extern \"C\" __global__ void name(...) so the launch code can find it."
  end
  local launch = luas[#luas]
  if #luas > 1 then
    return nil, fmt("Your reply has %d ```lua blocks. Send exactly one launch.lua.", #luas)
  end
  if not launch then
    if opts.default_launch then launch = opts.default_launch
    else
      return nil, "I found no ```lua block with the launch function. Add one:\n```lua\nreturn function(k, io, s)\n  k." ..
        knames[1] .. "{ grid = ..., block = ... }(...)\nend\n```"
    end
  end
  local fn, err = sandbox.load(launch, "launch.lua")
  if not fn then return nil, "launch.lua does not load: " .. tostring(err) .. ". It must be Lua code that returns function(k, io, s)." end
  for name in launch:gmatch("k%.([%a_][%w_]*)%s*[{(]") do
    if not kernels[name] and name ~= "scratch" and name ~= "cdiv" and name ~= "set_shared" then
      return nil, fmt("launch.lua calls k.%s, but kernel.cu defines only: %s. Launch kernels by their extern \"C\" names.", name, concat(knames, ", "))
    end
  end
  return { source = source, launch = launch, params = opts.params or {}, kernels = knames }
end

----------------------------------------------------------------------------------------
-- feedback

-- The text a model gets back for a verdict.
function M.verdict_text(v)
  local parts = { fmt("Verdict: %s.", v.status) }
  if v.feedback then insert(parts, v.feedback) end
  if v.status == "correct" and v.timing and v.timing.candidate then
    -- every figure named with the baseline it was divided by (km.feedback.speed)
    insert(parts, fmt("Timing on the timed shape (candidate median; p25 %.4f, p75 %.4f ms): %s. Roofline bound %.4f ms (%.0f%% reached).",
      v.timing.candidate.p25 or v.timing.candidate.median, v.timing.candidate.p75 or v.timing.candidate.median,
      require("km.feedback").speed(v), v.roofline and v.roofline.bound_ms or 0, v.roofline and 100 * v.roofline.fraction or 0))
  end
  return concat(parts, "\n")
end

-- How much one round may add to a conversation (characters): a reply that held no
-- candidate is kept short (its text cannot help the next try), a candidate's code blocks
-- stay whole, and the feedback (a compile log can be long) is cut in the middle.
M.KEEP_NO_CODE = 1500
M.KEEP_PROSE = 1200
M.KEEP_FEEDBACK = 4000


-- The reply as the conversation keeps it (km.run.context.shorten): whole when short.
function M.kept_reply(text, verdict)
  text = tostring(text or "")
  if verdict and statuses.prop(verdict.status, "stage") == "model" then return context.shorten(text, M.KEEP_NO_CODE) end
  local code = 0
  for b in text:gmatch("```[^\n]*\n.-```") do code = code + #b end
  return context.shorten(text, code + M.KEEP_PROSE)
end

-- Appends the model's reply and the feedback (with guidance) for the next round. Each
-- round's growth is bounded (see KEEP_*); km.run.context keeps the whole within the window.
function M.append_feedback(messages, reply, verdict, guides, ask)
  local content = type(reply) == "table" and (reply.content or "") or tostring(reply or "")
  insert(messages, { role = "assistant", content = M.kept_reply(content, verdict),
    km_call = type(reply) == "table" and reply.km_call or nil })
  local text = context.shorten(M.verdict_text(verdict), M.KEEP_FEEDBACK)
  if guides and #guides > 0 then text = text .. "\n\n" .. M.render_guides(guides) end
  text = text .. "\n\n" .. (ask or (verdict.status == "correct"
    and "Make it faster while keeping it correct. Reply with the whole new candidate."
    or "Fix the candidate. Reply with the whole corrected candidate (one ```cuda block, one ```lua block)."))
  insert(messages, { role = "user", content = text })
  return messages
end

-- A candidate as a reply text (for offline runs and for direct-response export).
function M.candidate_text(cand)
  return "```cuda\n" .. cand.source .. "\n```\n\n```lua\n" .. cand.launch .. "\n```"
end

return M
