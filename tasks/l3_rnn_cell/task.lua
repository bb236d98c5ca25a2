return {
  name = "l3_rnn_cell", level = 3, category = "rnn",
  description = "description.md",
  math = "h_new[t,j] = tanh(sum_p x[t,p]*w_ih[j,p] + b_ih[j] + sum_q h[t,q]*w_hh[j,q] + b_hh[j])",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = {
    { name = "x", dtype = "f32", shape = { "batch", "isz" }, init = { "uniform", -1, 1 } },
    { name = "h", dtype = "f32", shape = { "batch", "hsz" }, init = { "uniform", -1, 1 } },
    { name = "w_ih", dtype = "f32", shape = { "hsz", "isz" }, init = { "uniform", "-2/math.sqrt(isz + hsz)", "2/math.sqrt(isz + hsz)" } },
    { name = "w_hh", dtype = "f32", shape = { "hsz", "hsz" }, init = { "uniform", "-2/math.sqrt(isz + hsz)", "2/math.sqrt(isz + hsz)" } },
    { name = "b_ih", dtype = "f32", shape = { "hsz" }, init = { "uniform", -0.3, 0.3 } },
    { name = "b_hh", dtype = "f32", shape = { "hsz" }, init = { "uniform", -0.3, 0.3 } },
  },
  check_rows = "batch", -- row i of every output needs only row i of the inputs that begin with "batch"
  outputs = { { name = "h_new", dtype = "f32", shape = { "batch", "hsz" } } },
  shapes = {
    { batch = 2048, isz = 1024, hsz = 1024 },
    { batch = 1, isz = 1, hsz = 1 },
    { batch = 3, isz = 7, hsz = 33 },
    { batch = 37, isz = 65, hsz = 17 },
  },
  tolerance = { f32 = { atol = 1e-3, rtol = 1e-3 } },
  bytes = "4*(batch*isz + 2*batch*hsz + hsz*isz + hsz*hsz + 2*hsz)", flops = "2*batch*hsz*(isz + hsz)",
  starter = {
    dir = "starter",
    params = { TILE = { 16, 32, 64 }, RN = { 1, 2, 4 } },
    default = { TILE = 32, RN = 2 },
    constraints = { "TILE % RN == 0", "TILE * TILE // RN <= 1024" },
  },
}
