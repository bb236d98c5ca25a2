return {
  name = "l1_sigmoid", level = 1, category = "activation",
  description = "description.md",
  math = "y_i = 1 / (1 + exp(-x_i))",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -10, 10 } } },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n" } } },
  shapes = { { n = 1 << 28 }, { n = 1 }, { n = 999983 }, { n = 4097 } },
  tolerance = { f32 = { atol = 1e-6, rtol = 1e-5 } },
  bytes = "8*n", flops = "4*n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
