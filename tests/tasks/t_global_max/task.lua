-- One element from a whole tensor, for the judge's trust tests: a reference whose answer one
-- input element can decide (a spike makes it the maximum).
return {
  name = "t_global_max", level = 1, category = "reduction",
  description = "The largest element of x[n], into y[0].",
  math = "y_0 = max_i x_i",
  reference = { source = "reference.cu", launch = "reference.lua" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } } },
  outputs = { { name = "y", dtype = "f32", shape = { 1 } } },
  shapes = { { n = 1 << 24 }, { n = 1 }, { n = 1000003 }, { n = 4097 } },
  tolerance = { f32 = { atol = 0, rtol = 0 } },
  bytes = "4*n + 4", flops = "n",
}
