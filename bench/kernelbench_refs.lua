-- bench/kernelbench_refs.lua — every KernelBench problem file under the folders given loads
-- as a kmrun task and runs its PyTorch reference on this GPU, through the judge's own path
-- (problem loaded in this process on kmrun's context, inputs from get_inputs() under a seed
-- made on the GPU, parameters written out, forward on kmrun's stream into kmrun buffers).
--
--   build/kmrun bench/kernelbench_refs.lua [--precision fp32] [--max-s S] DIR...
--
-- Prints one line per problem (ok / FAIL with the reason, seconds) and a summary. Problem
-- files are read from a KernelBench checkout (never copied into this repository).
local judge_mod = require "km.judge"
local task = require "km.task"
local timing = require "km.timing"
local cuda = require "km.cuda"

local dirs, precision, max_s = {}, "fp32", math.huge
local i = 1
while arg[i] do
  if arg[i] == "--precision" then precision = arg[i + 1]; i = i + 1
  elseif arg[i] == "--max-s" then max_s = tonumber(arg[i + 1]); i = i + 1
  else dirs[#dirs + 1] = arg[i] end
  i = i + 1
end
if #dirs == 0 then io.stderr:write("usage: kmrun bench/kernelbench_refs.lua [--precision P] [--max-s S] DIR...\n") return 2 end

local files = {}
for _, d in ipairs(dirs) do
  local p = io.popen("ls -1 '" .. d .. "'/*.py 2>/dev/null | sort -V")
  for f in p:lines() do files[#files + 1] = f end
  p:close()
end

local judge = assert(judge_mod.new())
print(("device %s, %d problem files, precision %s, %s"):format(judge.device.name, #files, precision, os.date("!%Y-%m-%d")))
local t0 = timing.wall()
local ok_n, fail, done = 0, {}, 0
for _, f in ipairs(files) do
  if timing.wall() - t0 > max_s then break end
  local w0 = timing.wall()
  local why
  local key = require("km.kbtask").key(f, precision)
  local t, err = task.load(key)
  if not t then why = err
  else
    local okp, res = pcall(function()
      local st, serr = judge:task_state(t)
      if not st then return serr end
      local sym = t.shapes[1]
      local cand, ref_in, dims = judge:trial_io(t, sym, 1)
      judge:pristine(t, sym, ref_in, 1)
      local ref_io, rs, rmsg = judge:run_reference(st, ref_in, dims, sym)
      local out
      if not ref_io then out = tostring(rs) .. ": " .. tostring(rmsg) end
      judge.pool:put_all(cand); judge.pool:put_all(ref_in)
      if ref_io then for _, o in ipairs(t.outputs) do judge.pool:put(ref_io[o.name]) end end
      judge.pool:drop(true)
      st.prob:release { empty_cache = true }
      judge.tasks[t.dir] = nil
      return out
    end)
    if okp then why = res else why = tostring(res) end
    local alive, cmsg = cuda.synchronize()
    if not alive then why = (why or "") .. " (context lost: " .. tostring(cmsg) .. ")" print("FAIL " .. f .. ": " .. why) break end
  end
  done = done + 1
  local s = timing.wall() - w0
  if why then
    fail[#fail + 1] = f
    print(("FAIL %-60s %6.2f s  %s"):format(f, s, tostring(why):gsub("\n", " | "):sub(1, 400)))
  else
    ok_n = ok_n + 1
    print(("ok   %-60s %6.2f s"):format(f, s))
  end
end
print(("summary: %d of %d run (%d files), %d ok, %d failed, %.1f s"):format(done, #files, #files, ok_n, #fail, timing.wall() - t0))
return #fail == 0 and 0 or 1
