return {
  name = "l1_gelu", level = 1, category = "activation",
  description = "description.md",
  math = "y_i = 0.5 * x_i * (1 + erf(x_i / sqrt(2)))   (exact GELU, erf form)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -5, 5 } } },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n" } } },
  shapes = { { n = 1 << 28 }, { n = 1 }, { n = 1000003 }, { n = 4099 } },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-5 } },
  bytes = "8*n", flops = "8*n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 128, 256, 512, 1024 }, ITEMS = { 1, 2, 4, 8 } },
    default = { BLOCK = 256, ITEMS = 4 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
