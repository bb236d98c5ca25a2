return {
  name = "l1_sum_dim", level = 1, category = "reduction",
  description = "description.md",
  math = "y[b, c] = sum_{r=0}^{R-1} x[b, r, c]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "B", "R", "C" }, init = { "uniform", -1, 1 } } },
  check_rows = "B", -- row i of every output needs only row i of the inputs that begin with "B"
  outputs = { { name = "y", dtype = "f32", shape = { "B", "C" } } },
  shapes = {
    { B = 32, R = 4096, C = 4096 },
    { B = 2, R = 100003, C = 3 },
    { B = 5, R = 37, C = 129 },
    { B = 7, R = 1, C = 33 },
  },
  tolerance = { f32 = { atol = 1e-2, rtol = 1e-4 } },
  bytes = "4*B*R*C + 4*B*C", flops = "B*R*C",
  starter = {
    dir = "starter",
    params = { BY = { 1, 2, 4, 8, 16, 32 } },
    default = { BY = 8 },
  },
}
