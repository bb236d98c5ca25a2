// One thread per row, three plain passes; exponentials and the sum in double.
extern "C" __global__ void softmax_ref(const float *x, float *y, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float *xr = x + (size_t)r * cols;
  float *yr = y + (size_t)r * cols;
  float m = xr[0];
  for (int j = 1; j < cols; j++) m = fmaxf(m, xr[j]);
  double s = 0.0;
  for (int j = 0; j < cols; j++) s += exp((double)xr[j] - (double)m);
  for (int j = 0; j < cols; j++) yr[j] = (float)(exp((double)xr[j] - (double)m) / s);
}
