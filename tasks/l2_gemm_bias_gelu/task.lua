return {
  name = "l2_gemm_bias_gelu", level = 2, category = "gemm",
  description = "description.md",
  math = "y[i,j] = gelu(b[j] + sum_p x[i,p] * w[j,p]),  gelu(t) = 0.5*t*(1 + tanh(0.7978845608*(t + 0.044715*t^3)))",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "w", dtype = "f32", shape = { "n", "k" }, init = { "uniform", "-3/math.sqrt(k)", "3/math.sqrt(k)" } },
    { name = "b", dtype = "f32", shape = { "n" }, init = { "uniform", -0.5, 0.5 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "n" } } },
  shapes = {
    { m = 2048, n = 2048, k = 1024 },
    { m = 1, n = 37, k = 1 },
    { m = 33, n = 65, k = 7 },
    { m = 130, n = 3, k = 257 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(m*k + n*k + n + m*n)", flops = "2*m*n*k",
  starter = {
    dir = "starter",
    params = { TILE = { 8, 16, 32 }, RM = { 1, 2, 4 } },
    default = { TILE = 32, RM = 4 },
    constraints = { "TILE % RM == 0", "TILE * TILE // RM >= 32" },
  },
}
