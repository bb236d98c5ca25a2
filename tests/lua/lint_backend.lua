-- A lint backend in Lua for km.task.lint's CPU tests (test_lint_estimate, test_lint_timed):
-- values are { dtype, v = { numbers } }; inputs drawn by each spec's init rule from the seed.
--   local fake_backend = dofile(here .. "/lint_backend.lua")
--   local B = fake_backend(f, opts)  -- f(ins, sym) -> { output name -> { numbers } }
-- opts.skip(sym): the shape is too large here (runs answer SKIP). B.sampled records every
-- run's rows (sample_estimate's), B.seeds counts the runs per seed.
local task_mod = require "km.task"

return function(f, opts)
  opts = opts or {}
  local B = { where = "cpu", sampled = {}, seeds = {} }
  local function draw(spec, sym, seed, i)
    math.randomseed(seed * 7919 + i)
    local init, v = spec.init, {}
    for k = 1, task_mod.numel(task_mod.shape_of(spec, sym)) do
      local u = math.random()
      if init[1] == "normal" then
        v[k] = init[2] + init[3] * math.sqrt(-2 * math.log(1 - u)) * math.cos(2 * math.pi * math.random())
      else
        v[k] = init[2] + (init[3] - init[2]) * u
      end
    end
    return v
  end
  function B.open(tk) return { t = tk } end
  function B.run(s, sym, seed, rows)
    if opts.skip and opts.skip(sym) then return nil, "too large here", "SKIP" end
    B.seeds[seed] = (B.seeds[seed] or 0) + 1
    local ins, vals = {}, {}
    for i, spec in ipairs(s.t.inputs) do
      local v = draw(spec, sym, seed, i)
      if rows and rows.names[spec.name] then
        local keep = #v // rows.rows * rows.keep
        for k = keep + 1, #v do v[k] = v[(k - 1) % keep + 1] end
      end
      vals[spec.name] = v
      ins[spec.name] = { dtype = spec.dtype, v = v }
    end
    if rows then B.sampled[#B.sampled + 1] = { sym = sym, rows = rows } end
    local outs = {}
    for name, v in pairs(f(vals, sym)) do outs[name] = { dtype = "f32", v = v } end
    return { ins = ins, outs = outs }
  end
  function B.release() end
  function B.tile(x, keep) -- keep: bytes (4 a value)
    local k, v = keep // 4, {}
    for i = 1, #x.v do v[i] = x.v[(i - 1) % k + 1] end
    return { dtype = x.dtype, v = v }
  end
  function B.compare(a, b, tol)
    local r = { ok = #a.v == #b.v, mismatches = 0, max_abs = 0, nan = 0, inf = 0 }
    for k = 1, math.min(#a.v, #b.v) do
      local got, want = a.v[k], b.v[k]
      if got ~= got then r.nan = r.nan + 1 end
      local d = math.abs(got - want)
      if not (d <= tol.atol + tol.rtol * math.abs(want)) then r.ok, r.mismatches = false, r.mismatches + 1 end
      if d == d then r.max_abs = math.max(r.max_abs, d) end
    end
    return r
  end
  function B.zeros(like) local v = {} for k = 1, #like.v do v[k] = 0 end return { v = v } end
  function B.const(like, c) local v = {} for k = 1, #like.v do v[k] = c end return { v = v } end
  function B.sample(x) return x.v end
  function B.free() end
  function B.time() return nil, "timing needs a GPU" end
  function B.close() end
  return B
end
