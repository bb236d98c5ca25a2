return {
  name = "l1_argmax_dim", level = 1, category = "reduction",
  description = "description.md",
  math = "idx[r] = min { j : x[r, j] = max_k x[r, k] }",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "normal", 0, 1 } } },
  check_rows = "rows", -- row i of every output needs only row i of the inputs that begin with "rows"
  outputs = { { name = "idx", dtype = "i64", shape = { "rows" } } },
  shapes = {
    { rows = 65536, cols = 4096 },
    { rows = 1, cols = 1000003 },
    { rows = 129, cols = 257 },
    { rows = 1000, cols = 2 },
  },
  tolerance = { i64 = { atol = 0, rtol = 0 } },
  bytes = "4*rows*cols + 8*rows", flops = "rows*cols",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8, 16, 32 } },
    default = { WARPS = 8 },
  },
}
