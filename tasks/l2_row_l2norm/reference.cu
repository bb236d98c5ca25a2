// Naive reference: one thread per row, double accumulation.
extern "C" __global__ void row_l2norm_ref(const float *x, float *y, int m, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  double s = 0.0;
  for (int j = 0; j < k; ++j) {
    double v = x[(size_t)i * k + j];
    s += v * v;
  }
  y[i] = (float)sqrt(s);
}
