// One thread per row, three plain passes; logsumexp in double.
extern "C" __global__ void log_softmax_ref(const float *x, float *y, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float *xr = x + (size_t)r * cols;
  float *yr = y + (size_t)r * cols;
  float m = xr[0];
  for (int j = 1; j < cols; j++) m = fmaxf(m, xr[j]);
  double s = 0.0;
  for (int j = 0; j < cols; j++) s += exp((double)xr[j] - (double)m);
  double lse = (double)m + log(s);
  for (int j = 0; j < cols; j++) yr[j] = (float)((double)xr[j] - lse);
}
