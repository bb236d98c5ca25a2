return {
  name = "l2_gemm_rowsum", level = 2, category = "reduction",
  description = "description.md",
  math = "y[i] = sum_j max(0, bias[j] + sum_p x[i,p] * w[p,j])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "w", dtype = "f32", shape = { "k", "n" }, init = { "uniform", "-1/math.sqrt(k)", "1/math.sqrt(k)" } },
    { name = "bias", dtype = "f32", shape = { "n" }, init = { "uniform", -0.25, 0.25 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m" } } },
  shapes = {
    { m = 2048, n = 2048, k = 2048 },
    { m = 1, n = 37, k = 1 },
    { m = 33, n = 65, k = 7 },
    { m = 127, n = 31, k = 129 },
    { m = 65, n = 1, k = 300 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-4 } },
  bytes = "4*(m*k + k*n + n + m)", flops = "2*m*n*k",
  starter = {
    dir = "starter",
    params = { TILE = { 8, 16, 32 }, RM = { 1, 2, 4 } },
    default = { TILE = 32, RM = 4 },
    constraints = { "TILE % RM == 0", "TILE * TILE // RM >= 32" },
  },
}
