return {
  name = "l1_layernorm", level = 1, category = "normalization",
  description = "description.md",
  math = "mu_r = mean_j x[r,j]; var_r = mean_j (x[r,j] - mu_r)^2; y[r,j] = (x[r,j] - mu_r) / sqrt(var_r + 1e-5) * weight[j] + bias[j]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "normal", 1, 2 } },
    { name = "weight", dtype = "f32", shape = { "cols" }, init = { "uniform", 0.5, 1.5 } },
    { name = "bias", dtype = "f32", shape = { "cols" }, init = { "uniform", -0.5, 0.5 } },
  },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "y", dtype = "f32", shape = { "rows", "cols" } } },
  shapes = {
    { rows = 65536, cols = 1024 },
    { rows = 1, cols = 100003 },
    { rows = 127, cols = 33 },
    { rows = 1000, cols = 3 },
  },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-4 } },
  bytes = "8*rows*cols + 8*cols", flops = "6*rows*cols",
  starter = {
    dir = "starter",
    params = { BLOCK = { 32, 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
