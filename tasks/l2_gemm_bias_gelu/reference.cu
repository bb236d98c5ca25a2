// Naive reference: one thread per output element, float accumulation in k order.
extern "C" __global__ void linear_gelu_ref(const float *x, const float *w, const float *b, float *y,
                                           int m, int n, int k) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += x[(size_t)i * k + p] * w[(size_t)j * k + p];
  float t = acc + b[j];
  y[(size_t)i * n + j] = 0.5f * t * (1.0f + tanhf(0.7978845608028654f * (t + 0.044715f * t * t * t)));
}
