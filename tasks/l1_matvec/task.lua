return {
  name = "l1_matvec", level = 1, category = "matvec",
  description = "description.md",
  math = "y[i] = sum_{j=0}^{n-1} A[i, j] * x[j]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "A", dtype = "f32", shape = { "m", "n" }, init = { "uniform", -1, 1 } },
    { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m" } } },
  shapes = {
    { m = 32768, n = 8192 },
    { m = 1, n = 100003 },
    { m = 1000, n = 1 },
    { m = 257, n = 129 },
  },
  tolerance = { f32 = { atol = 5e-3, rtol = 1e-4 } },
  bytes = "4*m*n + 4*n + 4*m", flops = "2*m*n",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8, 16, 32 } },
    default = { WARPS = 8 },
  },
}
