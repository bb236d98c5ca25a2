return {
  name = "l3_conv_block", level = 3, category = "conv",
  description = "description.md",
  math = "t = relu(conv3x3(x, w1) + b1);  y = x + conv3x3(t, w2) + b2   (3x3, stride 1, zero padding 1, c -> c channels)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "n", "c", "h", "w" }, init = { "uniform", -1, 1 } },
    { name = "w1", dtype = "f32", shape = { "c", "c", 3, 3 }, init = { "uniform", "-1/math.sqrt(c)", "1/math.sqrt(c)" } },
    { name = "b1", dtype = "f32", shape = { "c" }, init = { "uniform", -0.2, 0.2 } },
    { name = "w2", dtype = "f32", shape = { "c", "c", 3, 3 }, init = { "uniform", "-1/math.sqrt(c)", "1/math.sqrt(c)" } },
    { name = "b2", dtype = "f32", shape = { "c" }, init = { "uniform", -0.2, 0.2 } },
  },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n", "c", "h", "w" } } },
  shapes = {
    { n = 16, c = 32, h = 128, w = 128 },
    { n = 1, c = 1, h = 1, w = 1 },
    { n = 2, c = 3, h = 9, w = 13 },
    { n = 1, c = 5, h = 17, w = 31 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(2*n*c*h*w + 18*c*c + 2*c)", flops = "36*n*c*c*h*w",
  starter = {
    dir = "starter",
    params = { TW = { 16, 32 }, TH = { 4, 8, 16 }, FPT = { 1, 2, 4, 8 } },
    default = { TW = 32, TH = 8, FPT = 4 },
    constraints = { "TW * TH <= 1024" },
  },
}
