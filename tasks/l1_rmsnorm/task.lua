return {
  name = "l1_rmsnorm", level = 1, category = "normalization",
  description = "description.md",
  math = "y[r,j] = x[r,j] / sqrt(mean_k x[r,k]^2 + 1e-6) * weight[j]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "normal", 0, 1 } },
    { name = "weight", dtype = "f32", shape = { "cols" }, init = { "uniform", 0.5, 1.5 } },
  },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "y", dtype = "f32", shape = { "rows", "cols" } } },
  shapes = {
    { rows = 32768, cols = 4096 },
    { rows = 1, cols = 100003 },
    { rows = 257, cols = 31 },
    { rows = 1000, cols = 1 },
  },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-4 } },
  bytes = "8*rows*cols + 4*cols", flops = "4*rows*cols",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8, 16, 32 } },
    default = { WARPS = 8 },
  },
}
