return {
  name = "l1_mse_loss", level = 1, category = "loss",
  description = "description.md",
  math = "loss = (1/n) * sum_{i=0}^{n-1} (pred_i - target_i)^2",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "pred", dtype = "f32", shape = { "n" }, init = { "normal", 0, 1 } },
    { name = "target", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } },
  },
  outputs = { { name = "loss", dtype = "f32", shape = { 1 } } },
  shapes = { { n = 1 << 28 }, { n = 3 }, { n = 1000003 }, { n = 4097 } },
  tolerance = { f32 = { atol = 1e-6, rtol = 1e-4 } },
  bytes = "8*n + 4", flops = "3*n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 128, 256, 512, 1024 }, WAVES = { 1, 2, 4, 8 } },
    default = { BLOCK = 256, WAVES = 4 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
