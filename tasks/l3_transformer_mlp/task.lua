return {
  name = "l3_transformer_mlp", level = 3, category = "mlp",
  description = "description.md",
  math = "hn = LayerNorm(x; gamma, beta, eps=1e-5);  y = x + gelu_tanh(hn @ w1 + b1) @ w2 + b2",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "d" }, init = { "normal", 0, 1 } },
    { name = "gamma", dtype = "f32", shape = { "d" }, init = { "uniform", 0.8, 1.2 } },
    { name = "beta", dtype = "f32", shape = { "d" }, init = { "uniform", -0.2, 0.2 } },
    { name = "w1", dtype = "f32", shape = { "d", "f" }, init = { "uniform", "-1.7/math.sqrt(d)", "1.7/math.sqrt(d)" } },
    { name = "b1", dtype = "f32", shape = { "f" }, init = { "uniform", -0.2, 0.2 } },
    { name = "w2", dtype = "f32", shape = { "f", "d" }, init = { "uniform", "-1/math.sqrt(f)", "1/math.sqrt(f)" } },
    { name = "b2", dtype = "f32", shape = { "d" }, init = { "uniform", -0.2, 0.2 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "d" } } },
  shapes = {
    { m = 2048, d = 512, f = 2048 },
    { m = 1, d = 1, f = 1 },
    { m = 5, d = 33, f = 7 },
    { m = 37, d = 64, f = 130 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(2*m*d + 2*d*f + f + 4*d)", flops = "4*m*d*f",
  starter = {
    dir = "starter",
    params = { TILE = { 16, 32 }, RM = { 1, 2, 4 }, LNBLOCK = { 64, 128, 256, 512 } },
    default = { TILE = 32, RM = 4, LNBLOCK = 128 },
    constraints = { "TILE % RM == 0", "LNBLOCK % 32 == 0" },
  },
}
