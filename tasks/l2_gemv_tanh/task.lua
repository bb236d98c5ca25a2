return {
  name = "l2_gemv_tanh", level = 2, category = "matvec",
  description = "description.md",
  math = "y[i] = tanh(b[i] + sum_p W[i,p] * x[p])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "W", dtype = "f32", shape = { "m", "k" }, init = { "uniform", "-3/math.sqrt(k)", "3/math.sqrt(k)" } },
    { name = "x", dtype = "f32", shape = { "k" }, init = { "uniform", -1, 1 } },
    { name = "b", dtype = "f32", shape = { "m" }, init = { "uniform", -0.5, 0.5 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m" } } },
  shapes = {
    { m = 16384, k = 16384 },
    { m = 1, k = 1 },
    { m = 33, k = 7 },
    { m = 129, k = 1025 },
    { m = 5, k = 4099 },
  },
  tolerance = { f32 = { atol = 5e-4, rtol = 1e-3 } },
  bytes = "4*(m*k + k + 2*m)", flops = "2*m*k",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8, 16 }, UNROLL = { 1, 2, 4 } },
    default = { WARPS = 4, UNROLL = 4 },
    constraints = {},
  },
}
