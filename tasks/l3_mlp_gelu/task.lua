return {
  name = "l3_mlp_gelu", level = 3, category = "mlp",
  description = "description.md",
  math = "y = gelu(x @ w1 + b1) @ w2 + b2,  gelu(t) = 0.5*t*(1 + erf(t/sqrt(2)))",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "m", "d" }, init = { "uniform", -1, 1 } },
    { name = "w1", dtype = "f32", shape = { "d", "h" }, init = { "uniform", "-3/math.sqrt(d)", "3/math.sqrt(d)" } },
    { name = "b1", dtype = "f32", shape = { "h" }, init = { "uniform", -0.5, 0.5 } },
    { name = "w2", dtype = "f32", shape = { "h", "o" }, init = { "uniform", "-1.7/math.sqrt(h)", "1.7/math.sqrt(h)" } },
    { name = "b2", dtype = "f32", shape = { "o" }, init = { "uniform", -0.5, 0.5 } },
  },
  check_rows = "m", -- row i of every output needs only row i of the inputs that begin with "m"
  outputs = { { name = "y", dtype = "f32", shape = { "m", "o" } } },
  shapes = {
    { m = 1024, d = 1024, h = 4096, o = 1024 },
    { m = 1, d = 1, h = 1, o = 1 },
    { m = 3, d = 17, h = 65, o = 5 },
    { m = 33, d = 7, h = 130, o = 31 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(m*d + d*h + h + h*o + o + m*o)", flops = "2*m*h*(d + o)",
  starter = {
    dir = "starter",
    params = { TILE = { 16, 32 }, RM = { 1, 2, 4 } },
    default = { TILE = 32, RM = 4 },
    constraints = { "TILE % RM == 0" },
  },
}
