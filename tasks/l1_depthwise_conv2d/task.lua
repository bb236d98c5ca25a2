return {
  name = "l1_depthwise_conv2d", level = 1, category = "conv",
  description = "description.md",
  math = "y[n,c,h,w] = sum_{i=0}^{2} sum_{j=0}^{2} x[n,c,h+i-1,w+j-1] * weight[c,i,j]   (x = 0 outside the image)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "N", "C", "H", "W" }, init = { "uniform", -1, 1 } },
    { name = "weight", dtype = "f32", shape = { "C", 3, 3 }, init = { "uniform", -1, 1 } },
  },
  check_rows = "N", -- row i of every output needs only row i of the inputs that begin with "N"
  outputs = { { name = "y", dtype = "f32", shape = { "N", "C", "H", "W" } } },
  shapes = {
    { N = 32, C = 128, H = 224, W = 224 },
    { N = 1, C = 1, H = 1, W = 1 },
    { N = 2, C = 3, H = 7, W = 129 },
    { N = 3, C = 5, H = 33, W = 1 },
    { N = 1, C = 2, H = 1, W = 1000 },
  },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-5 } },
  bytes = "8*N*C*H*W + 36*C", flops = "18*N*C*H*W",
  starter = {
    dir = "starter",
    params = { TX = { 16, 32, 64 }, TY = { 2, 4, 8, 16 } },
    default = { TX = 32, TY = 8 },
    constraints = { "TX * TY <= 1024" },
  },
}
