-- One element from two whole tensors and a scale, for kmrun tasks lint's sample estimate: a
-- mean over n elements that the first n/64 of them estimate within this (loose, half-precision
-- like) tolerance at the timed shape, while the scale makes it differ from seed to seed.
return {
  name = "t_scaled_mse", level = 1, category = "loss",
  description = "The mean of (scale[0] * pred[i] - target[i])^2 over i < n, into loss[0].",
  math = "loss_0 = (1/n) * sum_i (scale_0 * pred_i - target_i)^2",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "pred", dtype = "f32", shape = { "n" }, init = { "uniform", 0, 1 } },
    { name = "target", dtype = "f32", shape = { "n" }, init = { "uniform", 0, 1 } },
    { name = "scale", dtype = "f32", shape = { 1 }, init = { "uniform", 1, 4 } },
  },
  outputs = { { name = "loss", dtype = "f32", shape = { 1 } } },
  shapes = { { n = 1 << 24 }, { n = 4097 }, { n = 3 } },
  tolerance = { f32 = { atol = 1e-3, rtol = 2e-2 } },
  bytes = "8*n + 8", flops = "4*n",
}
