return {
  name = "l1_matmul_square", level = 1, category = "gemm",
  description = "description.md",
  math = "C[i, j] = sum_{p=0}^{n-1} A[i, p] * B[p, j]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "A", dtype = "f32", shape = { "n", "n" }, init = { "uniform", -1, 1 } },
    { name = "B", dtype = "f32", shape = { "n", "n" }, init = { "uniform", -1, 1 } },
  },
  outputs = { { name = "C", dtype = "f32", shape = { "n", "n" } } },
  shapes = { { n = 2048 }, { n = 1 }, { n = 127 }, { n = 257 } },
  tolerance = { f32 = { atol = 2e-3, rtol = 1e-4 } },
  bytes = "12*n*n", flops = "2*n*n*n",
  starter = {
    dir = "starter",
    params = { TILE = { 8, 16, 32 } },
    default = { TILE = 16 },
  },
}
