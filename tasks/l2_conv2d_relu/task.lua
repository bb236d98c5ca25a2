return {
  name = "l2_conv2d_relu", level = 2, category = "conv",
  description = "description.md",
  math = "y[b,o,i,j] = max(0, sum_{c,u,v} x[b,c,i+u-1,j+v-1] * weight[o,c,u,v])  (u,v in 0..2; x is 0 outside the image)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "n", "c", "h", "w" }, init = { "uniform", -1, 1 } },
    { name = "weight", dtype = "f32", shape = { "f", "c", 3, 3 }, init = { "uniform", "-1/math.sqrt(c)", "1/math.sqrt(c)" } },
  },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n", "f", "h", "w" } } },
  shapes = {
    { n = 16, c = 16, f = 32, h = 256, w = 256 },
    { n = 1, c = 2, f = 16, h = 1, w = 3 },
    { n = 2, c = 3, f = 5, h = 7, w = 33 },
    { n = 1, c = 4, f = 3, h = 31, w = 17 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(n*c*h*w + f*c*9 + n*f*h*w)", flops = "2*n*f*h*w*c*9",
  starter = {
    dir = "starter",
    params = { TW = { 16, 32 }, TH = { 4, 8, 16 }, FPT = { 1, 2, 4, 8 } },
    default = { TW = 32, TH = 8, FPT = 4 },
    constraints = { "TW * TH <= 1024" },
  },
}
