return {
  name = "l1_matmul_at_b", level = 1, category = "gemm",
  description = "description.md",
  math = "C[i, j] = sum_{p=0}^{k-1} A[p, i] * B[p, j]   (C = A^T B, A: k x m, B: k x n)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "A", dtype = "f32", shape = { "k", "m" }, init = { "uniform", -1, 1 } },
    { name = "B", dtype = "f32", shape = { "k", "n" }, init = { "uniform", -1, 1 } },
  },
  outputs = { { name = "C", dtype = "f32", shape = { "m", "n" } } },
  shapes = {
    { m = 2048, n = 1536, k = 3072 },
    { m = 1, n = 300, k = 129 },
    { m = 129, n = 1, k = 1000 },
    { m = 65, n = 127, k = 33 },
  },
  tolerance = { f32 = { atol = 2e-3, rtol = 1e-4 } },
  bytes = "4*(k*m + k*n + m*n)", flops = "2*m*n*k",
  starter = {
    dir = "starter",
    params = { TILE = { 8, 16, 32 } },
    default = { TILE = 16 },
  },
}
