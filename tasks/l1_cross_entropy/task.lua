return {
  name = "l1_cross_entropy", level = 1, category = "loss",
  description = "description.md",
  math = "loss[i] = log(sum_j exp(logits[i, j])) - logits[i, target[i]]",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "logits", dtype = "f32", shape = { "n", "c" }, init = { "normal", 0, 2 } },
    { name = "target", dtype = "i32", shape = { "n" }, init = { "int", 0, "c - 1" } },
  },
  check_rows = "n", -- row i of every output needs only row i of the inputs that begin with "n"
  outputs = { { name = "loss", dtype = "f32", shape = { "n" } } },
  shapes = {
    { n = 16384, c = 8192 },
    { n = 1, c = 100003 },
    { n = 1000, c = 2 },
    { n = 127, c = 1025 },
  },
  tolerance = { f32 = { atol = 1e-4, rtol = 1e-5 } },
  bytes = "4*n*c + 8*n", flops = "3*n*c",
  starter = {
    dir = "starter",
    params = { BLOCK = { 32, 64, 128, 256, 512, 1024 } },
    default = { BLOCK = 256 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
