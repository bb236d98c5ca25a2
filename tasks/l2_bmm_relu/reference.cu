// Naive reference: one thread per output element; blockIdx.z is the batch index.
extern "C" __global__ void bmm_relu_ref(const float *a, const float *b, float *c, int batch, int m, int n, int k) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  size_t t = blockIdx.z;
  if (i >= m || j >= n) return;
  const float *at = a + t * m * k;
  const float *bt = b + t * k * n;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += at[(size_t)i * k + p] * bt[(size_t)p * n + j];
  c[(t * m + i) * n + j] = acc > 0.0f ? acc : 0.0f;
}
