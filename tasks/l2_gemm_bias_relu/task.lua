return {
  name = "l2_gemm_bias_relu", level = 2, category = "gemm",
  description = "description.md",
  math = "y[m,n] = max(0, bias[n] + sum_k x[m,k] * w[k,n])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "w", dtype = "f32", shape = { "k", "n" }, init = { "uniform", "-1/math.sqrt(k)", "1/math.sqrt(k)" } },
    { name = "bias", dtype = "f32", shape = { "n" }, init = { "uniform", -0.25, 0.25 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "n" } } },
  shapes = {
    { m = 2048, n = 2048, k = 2048 },
    { m = 1, n = 37, k = 1 },
    { m = 33, n = 65, k = 7 },
    { m = 127, n = 31, k = 129 },
    { m = 67, n = 1, k = 130 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(m*k + k*n + n + m*n)", flops = "2*m*n*k",
  starter = {
    dir = "starter",
    params = { TILE = { 8, 16, 32 }, RM = { 1, 2, 4 } },
    default = { TILE = 32, RM = 4 },
    constraints = { "TILE % RM == 0", "TILE * TILE // RM >= 32" },
  },
}
