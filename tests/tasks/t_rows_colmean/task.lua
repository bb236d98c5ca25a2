-- A task whose check_rows is false, for the judge's own tests (tests/gpu/test_check_rows.lua):
-- each output row needs every input row (the column means), so the reference on a sample of
-- rows is not the reference's rows. The judge must say so, not fail the candidate. No starter:
-- tests/tasks holds one task with a starter (the offline provider's tests run those).
return {
  name = "t_rows_colmean", level = 1, category = "normalization",
  description = "Subtract each column's mean from x[rows][cols]: y[r][c] = x[r][c] - mean over r of x[r][c].",
  math = "y_{r,c} = x_{r,c} - (1/rows) sum_r' x_{r',c}",
  reference = { source = "reference.cu", launch = "reference.lua" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", 0, 1 } } },
  check_rows = "rows", -- false: a row of y needs every row of x
  outputs = { { name = "y", dtype = "f32", shape = { "rows", "cols" } } },
  shapes = { { rows = 16384, cols = 256 }, { rows = 5, cols = 3 } },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-4 } },
  bytes = "8*rows*cols", flops = "2*rows*cols",
}
