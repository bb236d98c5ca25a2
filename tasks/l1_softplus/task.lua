return {
  name = "l1_softplus", level = 1, category = "activation",
  description = "description.md",
  math = "y_i = log(1 + exp(x_i)) = max(x_i, 0) + log1p(exp(-|x_i|))",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -20, 20 } } },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n" } } },
  shapes = { { n = 1 << 28 }, { n = 1 }, { n = 1000003 }, { n = 65537 } },
  tolerance = { f32 = { atol = 1e-6, rtol = 1e-5 } },
  bytes = "8*n", flops = "5*n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 128, 256, 512, 1024 }, ITEMS = { 1, 2, 4 } },
    default = { BLOCK = 256, ITEMS = 2 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
