return {
  name = "l1_mse_loss", level = 1, category = "loss",
  description = "description.md",
  math = "loss_r = (1/cols) * sum_{c=0}^{cols-1} (pred_{r,c} - target_{r,c})^2",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "pred", dtype = "f32", shape = { "rows", "cols" }, init = { "normal", 0, 1 } },
    { name = "target", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", -1, 1 } },
  },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "loss", dtype = "f32", shape = { "rows" } } },
  shapes = {
    { rows = 16384, cols = 16384 },
    { rows = 1, cols = 100003 },
    { rows = 1000, cols = 1 },
    { rows = 129, cols = 257 },
  },
  tolerance = { f32 = { atol = 1e-6, rtol = 1e-4 } },
  bytes = "8*rows*cols + 4*rows", flops = "3*rows*cols",
  starter = {
    dir = "starter",
    params = { BLOCK = { 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
