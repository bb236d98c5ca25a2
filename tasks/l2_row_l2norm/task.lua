return {
  name = "l2_row_l2norm", level = 2, category = "reduction",
  description = "description.md",
  math = "y[i] = sqrt(sum_j x[i,j]^2)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "k" }, init = { "normal", 0, 1 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m" } } },
  shapes = {
    { m = 16384, k = 16384 },
    { m = 1, k = 1 },
    { m = 7, k = 33 },
    { m = 129, k = 1000 },
    { m = 2, k = 5003 },
  },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-4 } },
  bytes = "4*(m*k + m)", flops = "2*m*k",
  starter = {
    dir = "starter",
    params = { BLOCK = { 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
