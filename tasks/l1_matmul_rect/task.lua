return {
  name = "l1_matmul_rect", level = 1, category = "gemm",
  description = "description.md",
  math = "C[i, j] = sum_{p=0}^{k-1} A[i, p] * B[p, j],  A: m x k, B: k x n",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "A", dtype = "f32", shape = { "m", "k" }, init = { "uniform", -1, 1 } },
    { name = "B", dtype = "f32", shape = { "k", "n" }, init = { "uniform", -1, 1 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "C", dtype = "f32", shape = { "m", "n" } } },
  shapes = {
    { m = 2048, n = 1024, k = 4096 },
    { m = 1, n = 1, k = 1 },
    { m = 127, n = 65, k = 33 },
    { m = 300, n = 1, k = 1001 },
    { m = 1, n = 517, k = 129 },
  },
  tolerance = { f32 = { atol = 2e-3, rtol = 1e-4 } },
  bytes = "4*(m*k + k*n + m*n)", flops = "2*m*n*k",
  starter = {
    dir = "starter",
    params = { TS = { 8, 16, 32 }, RM = { 1, 2, 4, 8 } },
    default = { TS = 16, RM = 4 },
  },
}
