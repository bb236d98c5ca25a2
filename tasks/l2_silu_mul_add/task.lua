return {
  name = "l2_silu_mul_add", level = 2, category = "activation",
  description = "description.md",
  math = "out_i = x_i * sigmoid(x_i) * y_i + z_i,  sigmoid(t) = 1 / (1 + exp(-t))",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -6, 6 } },
    { name = "y", dtype = "f32", shape = { "n" }, init = { "normal", 0, 1 } },
    { name = "z", dtype = "f32", shape = { "n" }, init = { "normal", 0, 1 } },
  },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "out", dtype = "f32", shape = { "n" } } },
  shapes = { { n = 1 << 28 }, { n = 1 }, { n = 1000003 }, { n = 4097 } },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-5 } },
  bytes = "16*n", flops = "6*n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 128, 256, 512, 1024 }, UNROLL = { 1, 2, 4, 8 } },
    default = { BLOCK = 256, UNROLL = 4 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
