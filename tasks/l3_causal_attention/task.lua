return {
  name = "l3_causal_attention", level = 3, category = "attention",
  description = "description.md",
  math = "S = q @ k^T / sqrt(d);  S[i,j] = -inf for j > i;  out = softmax(S, rows) @ v   (per batch and head)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "q", dtype = "f32", shape = { "b", "heads", "s", "d" }, init = { "normal", 0, 1 } },
    { name = "k", dtype = "f32", shape = { "b", "heads", "s", "d" }, init = { "normal", 0, 1 } },
    { name = "v", dtype = "f32", shape = { "b", "heads", "s", "d" }, init = { "normal", 0, 1 } },
  },
  check_rows = "b", -- row i of every output needs only row i of the inputs that begin with "b"
  outputs = { { name = "out", dtype = "f32", shape = { "b", "heads", "s", "d" } } },
  shapes = {
    { b = 2, heads = 8, s = 2048, d = 64 },
    { b = 1, heads = 1, s = 1, d = 1 },
    { b = 1, heads = 2, s = 97, d = 64 },
    { b = 2, heads = 3, s = 33, d = 17 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "16*b*heads*s*d", flops = "2*b*heads*s*(s+1)*d",
  starter = {
    dir = "starter",
    params = { BLOCK = { 32, 64, 128, 256, 512 } },
    default = { BLOCK = 128 },
    constraints = { "BLOCK % 32 == 0" },
  },
}
