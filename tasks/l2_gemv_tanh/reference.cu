// Naive reference: one thread per row, double accumulation.
extern "C" __global__ void gemv_tanh_ref(const float *W, const float *x, const float *b, float *y, int m, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  double acc = b[i];
  for (int p = 0; p < k; ++p) acc += (double)W[(size_t)i * k + p] * x[p];
  y[i] = (float)tanh(acc);
}
