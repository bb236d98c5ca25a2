return {
  name = "l2_matmul_scale_residual", level = 2, category = "gemm",
  description = "description.md",
  math = "y[i,j] = r[i,j] + 0.5 * sum_p x[i,p] * w[j,p]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "w", dtype = "f32", shape = { "n", "k" }, init = { "uniform", "-1/math.sqrt(k)", "1/math.sqrt(k)" } },
    { name = "r", dtype = "f32", shape = { "m", "n" }, init = { "normal", 0, 1 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "n" } } },
  shapes = {
    { m = 4096, n = 1024, k = 1024 },
    { m = 1, n = 1, k = 1 },
    { m = 33, n = 65, k = 7 },
    { m = 131, n = 17, k = 200 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(m*k + n*k + 2*m*n)", flops = "2*m*n*k",
  starter = {
    dir = "starter",
    params = { TILE = { 16, 32, 64 }, RN = { 1, 2, 4 } },
    default = { TILE = 32, RN = 2 },
    constraints = { "TILE % RN == 0", "TILE * TILE // RN <= 1024" },
  },
}
