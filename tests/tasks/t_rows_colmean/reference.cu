extern "C" __global__ void colmean_ref(const float *x, float *y, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double acc = 0;
  for (int r = 0; r < rows; r++) acc += x[(size_t)r * cols + c];
  float mean = (float)(acc / rows);
  for (int r = 0; r < rows; r++) y[(size_t)r * cols + c] = x[(size_t)r * cols + c] - mean;
}
