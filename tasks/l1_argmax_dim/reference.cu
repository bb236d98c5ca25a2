// One thread per row, a plain loop; strict '>' keeps the first index of the maximum.
extern "C" __global__ void argmax_dim_ref(const float *x, long long *idx, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float *xr = x + (size_t)r * cols;
  float best = xr[0];
  int bi = 0;
  for (int j = 1; j < cols; j++)
    if (xr[j] > best) { best = xr[j]; bi = j; }
  idx[r] = bi;
}
