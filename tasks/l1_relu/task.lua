return {
  name = "l1_relu", level = 1, category = "activation",
  description = "description.md",
  math = "y_i = max(x_i, 0)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } } },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n" } } },
  shapes = { { n = 1 << 28 }, { n = 1 }, { n = 1000003 }, { n = 4097 } },
  tolerance = { f32 = { atol = 0, rtol = 0 } },
  bytes = "8*n", flops = "n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
