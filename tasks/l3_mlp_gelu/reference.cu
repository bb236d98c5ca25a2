// Naive reference: two kernels, one thread per output element each, float accumulation.
extern "C" __global__ void linear_gelu_ref(const float *x, const float *w, const float *b, float *u, int m, int d, int h) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= h) return;
  float acc = 0.0f;
  for (int p = 0; p < d; ++p) acc += x[(size_t)i * d + p] * w[(size_t)p * h + j];
  float t = acc + b[j];
  u[(size_t)i * h + j] = 0.5f * t * (1.0f + erff(t * 0.70710678118654752440f));
}

extern "C" __global__ void linear_ref(const float *u, const float *w, const float *b, float *y, int m, int h, int o) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= o) return;
  float acc = 0.0f;
  for (int q = 0; q < h; ++q) acc += u[(size_t)i * h + q] * w[(size_t)q * o + j];
  y[(size_t)i * o + j] = acc + b[j];
}
