-- An output with a part that does not depend on the inputs (zero padding after the ReLU),
-- for the judge's trust tests: a kernel must write all of it on every call.
return {
  name = "t_pad_relu", level = 1, category = "activation",
  description = "y[i] = max(x[i], 0) for i < n, then pad zeros: y has n + pad elements.",
  math = "y_i = max(x_i, 0) (i < n); y_i = 0 (n <= i < n + pad)",
  reference = { source = "reference.cu", launch = "reference.lua" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } } },
  outputs = { { name = "y", dtype = "f32", shape = { "n + pad" } } },
  shapes = { { n = 1 << 22, pad = 1 << 18 }, { n = 1, pad = 1 << 18 }, { n = 1000003, pad = 1 << 18 } },
  tolerance = { f32 = { atol = 0, rtol = 0 } },
  bytes = "8*n + 4*pad", flops = "n",
}
