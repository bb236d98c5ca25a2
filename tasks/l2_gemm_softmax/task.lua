return {
  name = "l2_gemm_softmax", level = 2, category = "gemm",
  description = "description.md",
  math = "z = x @ w;  y[i,j] = exp(z[i,j] - max_q z[i,q]) / sum_q exp(z[i,q] - max_q z[i,q])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "w", dtype = "f32", shape = { "k", "n" }, init = { "uniform", "-4.5/math.sqrt(k)", "4.5/math.sqrt(k)" } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "n" } } },
  shapes = {
    { m = 2048, n = 2048, k = 1024 },
    { m = 1, n = 7, k = 1 },
    { m = 37, n = 129, k = 65 },
    { m = 130, n = 1025, k = 17 },
  },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-3 } },
  bytes = "4*(m*k + k*n + m*n)", flops = "2*m*n*k + 3*m*n",
  starter = {
    dir = "starter",
    params = { TILE = { 16, 32 }, RM = { 1, 2, 4 }, SBLOCK = { 128, 256, 512, 1024 } },
    default = { TILE = 32, RM = 4, SBLOCK = 256 },
    constraints = { "TILE % RM == 0", "SBLOCK % 32 == 0" },
  },
}
