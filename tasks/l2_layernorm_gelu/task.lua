return {
  name = "l2_layernorm_gelu", level = 2, category = "normalization",
  description = "description.md",
  math = "mu_i = mean_j x[i,j];  var_i = mean_j (x[i,j] - mu_i)^2;  t = (x[i,j] - mu_i) / sqrt(var_i + 1e-5) * gamma[j] + beta[j];  y[i,j] = 0.5*t*(1 + erf(t/sqrt(2)))",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "d" }, init = { "uniform", -2, 3 } },
    { name = "gamma", dtype = "f32", shape = { "d" }, init = { "uniform", 0.5, 1.5 } },
    { name = "beta", dtype = "f32", shape = { "d" }, init = { "uniform", -0.5, 0.5 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "d" } } },
  shapes = {
    { m = 16384, d = 4096 },
    { m = 1, d = 1 },
    { m = 3, d = 33 },
    { m = 67, d = 1000 },
    { m = 5, d = 4099 },
  },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-4 } },
  bytes = "4*(2*m*d + 2*d)", flops = "8*m*d",
  starter = {
    dir = "starter",
    params = { BLOCK = { 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
