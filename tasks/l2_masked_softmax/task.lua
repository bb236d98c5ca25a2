return {
  name = "l2_masked_softmax", level = 2, category = "attention",
  description = "description.md",
  math = "y[i,j] = (j < len[i]) ? exp(x[i,j]/8 - M_i) / sum_{q < len[i]} exp(x[i,q]/8 - M_i) : 0,  M_i = max_{q < len[i]} x[i,q]/8",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "b", "n" }, init = { "uniform", -16, 16 } },
    { name = "len", dtype = "i32", shape = { "b" }, init = { "int", 1, "n" } },
  },
  check_rows = "b", -- row i of every output needs only row i of the inputs that begin with "b"
  outputs = { { name = "y", dtype = "f32", shape = { "b", "n" } } },
  shapes = {
    { b = 16384, n = 4096 },
    { b = 1, n = 7 },
    { b = 5, n = 33 },
    { b = 70, n = 1000 },
    { b = 2, n = 4099 },
  },
  tolerance = { f32 = { atol = 1e-6, rtol = 1e-4 } },
  bytes = "4*(2*b*n + b)", flops = "4*b*n",
  starter = {
    dir = "starter",
    params = { BLOCK = { 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
