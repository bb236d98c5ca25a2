// Naive reference in two kernels, one thread per output element each (float accumulation):
//   1. a = x @ w_ih^T + b_ih  (scratch [batch, hsz])
//   2. h_new = tanh(a + h @ w_hh^T + b_hh)
extern "C" __global__ void input_proj_ref(const float *x, const float *w_ih, const float *b_ih, float *a,
                                          int batch, int isz, int hsz) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int t = blockIdx.y * blockDim.y + threadIdx.y;
  if (t >= batch || j >= hsz) return;
  float acc = 0.0f;
  for (int p = 0; p < isz; ++p) acc += x[(size_t)t * isz + p] * w_ih[(size_t)j * isz + p];
  a[(size_t)t * hsz + j] = acc + b_ih[j];
}

extern "C" __global__ void hidden_tanh_ref(const float *a, const float *h, const float *w_hh, const float *b_hh,
                                           float *h_new, int batch, int hsz) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int t = blockIdx.y * blockDim.y + threadIdx.y;
  if (t >= batch || j >= hsz) return;
  float acc = 0.0f;
  for (int q = 0; q < hsz; ++q) acc += h[(size_t)t * hsz + q] * w_hh[(size_t)j * hsz + q];
  h_new[(size_t)t * hsz + j] = tanhf(a[(size_t)t * hsz + j] + acc + b_hh[j]);
}
