return {
  name = "l1_max_dim", level = 1, category = "reduction",
  description = "description.md",
  math = "y[r] = max_j x[r, j]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "normal", 0, 1 } } },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "y", dtype = "f32", shape = { "rows" } } },
  shapes = {
    { rows = 32768, cols = 8192 },
    { rows = 1, cols = 1000003 },
    { rows = 127, cols = 257 },
    { rows = 1000, cols = 1 },
  },
  tolerance = { f32 = { atol = 0, rtol = 0 } },
  bytes = "4*rows*cols + 4*rows", flops = "rows*cols",
  starter = {
    dir = "starter",
    params = { BLOCK = { 32, 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
