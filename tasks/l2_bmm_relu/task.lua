return {
  name = "l2_bmm_relu", level = 2, category = "gemm",
  description = "description.md",
  math = "c[t,i,j] = max(0, sum_p a[t,i,p] * b[t,p,j])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "a", dtype = "f32", shape = { "batch", "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "b", dtype = "f32", shape = { "batch", "k", "n" }, init = { "uniform", "-1.7/math.sqrt(k)", "1.7/math.sqrt(k)" } },
  },
  check_rows = "batch", -- row i of every output needs only row i of the inputs that begin with "batch"
  outputs = { { name = "c", dtype = "f32", shape = { "batch", "m", "n" } } },
  shapes = {
    { batch = 16384, m = 64, n = 64, k = 64 },
    { batch = 1, m = 1, n = 37, k = 1 },
    { batch = 3, m = 5, n = 33, k = 7 },
    { batch = 2, m = 65, n = 17, k = 63 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*batch*(m*k + k*n + m*n)", flops = "2*batch*m*n*k",
  starter = {
    dir = "starter",
    params = { TILE = { 8, 16, 32 } },
    default = { TILE = 16 },
    constraints = {},
  },
}
