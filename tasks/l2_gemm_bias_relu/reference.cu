// Naive reference: one thread per output element, float accumulation in k order.
extern "C" __global__ void gemm_bias_relu_ref(const float *x, const float *w, const float *bias, float *y,
                                              int m, int n, int k) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += x[(size_t)i * k + p] * w[(size_t)p * n + j];
  float v = acc + bias[j];
  y[(size_t)i * n + j] = v > 0.0f ? v : 0.0f;
}
