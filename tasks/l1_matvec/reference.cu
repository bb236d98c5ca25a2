// One thread per output row, a plain dot product accumulated in double.
extern "C" __global__ void matvec_ref(const float *A, const float *x, float *y, int m, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const float *a = A + (size_t)i * n;
  double s = 0.0;
  for (int j = 0; j < n; j++) s += (double)a[j] * (double)x[j];
  y[i] = (float)s;
}
