return {
  name = "l2_bias_layernorm", level = 2, category = "normalization",
  description = "description.md",
  math = "z = x[i,:] + bias;  y[i,j] = (z_j - mean(z)) / sqrt(mean((z - mean(z))^2) + 1e-6) * gamma[j] + beta[j]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "d" }, init = { "normal", 0, 1 } },
    { name = "bias", dtype = "f32", shape = { "d" }, init = { "uniform", -1, 1 } },
    { name = "gamma", dtype = "f32", shape = { "d" }, init = { "uniform", 0.5, 1.5 } },
    { name = "beta", dtype = "f32", shape = { "d" }, init = { "uniform", -0.5, 0.5 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "d" } } },
  shapes = {
    { m = 65536, d = 2048 },
    { m = 1, d = 1 },
    { m = 7, d = 33 },
    { m = 129, d = 767 },
    { m = 3, d = 2053 },
  },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-4 } },
  bytes = "4*(2*m*d + 3*d)", flops = "7*m*d",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8 }, VPT = { 4, 8, 16, 32, 64 } },
    default = { WARPS = 4, VPT = 64 },
    constraints = {},
  },
}
