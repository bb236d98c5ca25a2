return {
  name = "l1_maxpool2d", level = 1, category = "pooling",
  description = "description.md",
  math = "y[n,c,p,q] = max_{i,j in {0,1,2}, inside} x[n,c,2p+i-1,2q+j-1],  Ho = (H-1)//2 + 1, Wo = (W-1)//2 + 1",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "N", "C", "H", "W" }, init = { "normal", 0, 1 } } },
  check_rows = "N", -- row i of every output needs only row i of the inputs that begin with "N"
  outputs = { { name = "y", dtype = "f32", shape = { "N", "C", "(H - 1) // 2 + 1", "(W - 1) // 2 + 1" } } },
  shapes = {
    { N = 32, C = 64, H = 448, W = 448 },
    { N = 1, C = 1, H = 1, W = 1 },
    { N = 2, C = 3, H = 5, W = 7 },
    { N = 1, C = 2, H = 2, W = 1001 },
    { N = 3, C = 1, H = 17, W = 2 },
  },
  tolerance = { f32 = { atol = 0, rtol = 0 } },
  bytes = "4*N*C*H*W + 4*N*C*((H - 1) // 2 + 1)*((W - 1) // 2 + 1)",
  flops = "8*N*C*((H - 1) // 2 + 1)*((W - 1) // 2 + 1)",
  starter = {
    dir = "starter",
    params = { BX = { 16, 32, 64 }, BY = { 1, 2, 4, 8 } },
    default = { BX = 32, BY = 4 },
  },
}
