-- A small reduction task for the evaluator's own tests (races, scratch).
return {
  name = "t_rowsum", level = 1, category = "reduction",
  description = "Sum each row of a row-major f32 matrix x[rows][cols] into y[rows].",
  math = "y_r = sum_c x_{r,c}",
  reference = { source = "reference.cu", launch = "reference.lua" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", -1, 1 } } },
  outputs = { { name = "y", dtype = "f32", shape = { "rows" } } },
  shapes = { { rows = 4096, cols = 4096 }, { rows = 3, cols = 1000 }, { rows = 1, cols = 1 }, { rows = 7, cols = 257 } },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-4 } },
  bytes = "4*rows*cols + 4*rows", flops = "rows*cols",
  starter = { dir = "starter", params = { BLOCK = { 64, 128, 256, 512, 1024 } }, default = { BLOCK = 256 } },
}
