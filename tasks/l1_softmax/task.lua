return {
  name = "l1_softmax", level = 1, category = "softmax",
  description = "description.md",
  math = "y[r, j] = exp(x[r, j] - max_k x[r, k]) / sum_k exp(x[r, k] - max_k x[r, k])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", -5, 5 } } },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "y", dtype = "f32", shape = { "rows", "cols" } } },
  shapes = {
    { rows = 65536, cols = 1024 },
    { rows = 1, cols = 100003 },
    { rows = 4099, cols = 37 },
    { rows = 3, cols = 2 },
  },
  tolerance = { f32 = { atol = 1e-6, rtol = 1e-4 } },
  bytes = "8*rows*cols", flops = "4*rows*cols",
  starter = {
    dir = "starter",
    params = { BLOCK = { 32, 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
