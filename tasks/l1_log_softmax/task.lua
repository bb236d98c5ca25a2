return {
  name = "l1_log_softmax", level = 1, category = "softmax",
  description = "description.md",
  math = "y[r, j] = x[r, j] - m_r - log(sum_k exp(x[r, k] - m_r)),  m_r = max_k x[r, k]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", -5, 5 } } },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "y", dtype = "f32", shape = { "rows", "cols" } } },
  shapes = {
    { rows = 32768, cols = 2048 },
    { rows = 1, cols = 100003 },
    { rows = 1025, cols = 33 },
    { rows = 5, cols = 2 },
  },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-5 } },
  bytes = "8*rows*cols", flops = "4*rows*cols",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8, 16 } },
    default = { WARPS = 4 },
  },
}
