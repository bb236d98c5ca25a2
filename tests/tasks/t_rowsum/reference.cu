extern "C" __global__ void rowsum_ref(const float *x, float *y, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double acc = 0;
  for (int c = 0; c < cols; c++) acc += x[(size_t)r * cols + c];
  y[r] = (float)acc;
}
