return {
  name = "l2_conv2d_bias_sigmoid", level = 2, category = "conv",
  description = "description.md",
  math = "y[b,o,i,j] = sigmoid(bias[o] + sum_{c,u,v} x[b,c,i+u,j+v] * weight[o,c,u,v]),  u,v in 0..2,  i < h-2, j < w-2",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "n", "c", "h", "w" }, init = { "uniform", -1, 1 } },
    { name = "weight", dtype = "f32", shape = { "f", "c", 3, 3 }, init = { "uniform", "-1.5/math.sqrt(c)", "1.5/math.sqrt(c)" } },
    { name = "bias", dtype = "f32", shape = { "f" }, init = { "uniform", -1, 1 } },
  },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "y", dtype = "f32", shape = { "n", "f", "h - 2", "w - 2" } } },
  shapes = {
    { n = 32, c = 3, f = 64, h = 256, w = 256 },
    { n = 1, c = 1, f = 2, h = 3, w = 4 },
    { n = 2, c = 3, f = 5, h = 9, w = 34 },
    { n = 1, c = 2, f = 7, h = 35, w = 3 },
  },
  tolerance = { f32 = { atol = 2e-4, rtol = 1e-3 } },
  bytes = "4*(n*c*h*w + f*c*9 + f + n*f*(h-2)*(w-2))", flops = "2*n*f*(h-2)*(w-2)*c*9",
  starter = {
    dir = "starter",
    params = { BX = { 32, 64, 128, 256 }, FB = { 4, 8, 16 } },
    default = { BX = 128, FB = 8 },
    constraints = { "BX % 32 == 0" },
  },
}
