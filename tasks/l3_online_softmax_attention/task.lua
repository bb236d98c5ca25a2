return {
  name = "l3_online_softmax_attention", level = 3, category = "attention",
  description = "description.md",
  math = "out = softmax(q @ k^T / sqrt(d), rows) @ v   (per batch and head; sq queries, sk keys, no mask)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "q", dtype = "f32", shape = { "b", "heads", "sq", "d" }, init = { "normal", 0, 1 } },
    { name = "k", dtype = "f32", shape = { "b", "heads", "sk", "d" }, init = { "normal", 0, 1 } },
    { name = "v", dtype = "f32", shape = { "b", "heads", "sk", "d" }, init = { "normal", 0, 1 } },
  },
  check_rows = "b", -- row i of every output needs only row i of the inputs that begin with "b"
  outputs = { { name = "out", dtype = "f32", shape = { "b", "heads", "sq", "d" } } },
  shapes = {
    { b = 2, heads = 8, sq = 1024, sk = 2048, d = 64 },
    { b = 1, heads = 1, sq = 1, sk = 1, d = 1 },
    { b = 1, heads = 2, sq = 5, sk = 97, d = 64 },
    { b = 2, heads = 1, sq = 33, sk = 7, d = 40 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*b*heads*d*(2*sq + 2*sk)", flops = "4*b*heads*sq*sk*d",
  starter = {
    dir = "starter",
    params = { WARPS = { 1, 2, 4, 8 }, DMAX = { 64, 128 } },
    default = { WARPS = 4, DMAX = 64 },
    constraints = {},
  },
}
