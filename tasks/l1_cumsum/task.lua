return {
  name = "l1_cumsum", level = 1, category = "scan",
  description = "description.md",
  math = "y[r, j] = sum_{q=0}^{j} x[r, q]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", -1, 1 } } },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "y", dtype = "f32", shape = { "rows", "cols" } } },
  shapes = {
    { rows = 32768, cols = 4096 },
    { rows = 1, cols = 65537 },
    { rows = 1000, cols = 1 },
    { rows = 37, cols = 3001 },
  },
  tolerance = { f32 = { atol = 5e-3, rtol = 1e-4 } },
  bytes = "8*rows*cols", flops = "rows*cols",
  starter = {
    dir = "starter",
    params = { BLOCK = { 64, 128, 256, 512, 1024 }, ITEMS = { 1, 2, 4, 8 } },
    default = { BLOCK = 256, ITEMS = 4 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
