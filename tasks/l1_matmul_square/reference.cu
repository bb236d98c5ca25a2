// One thread per output element, a plain dot product accumulated in double.
extern "C" __global__ void matmul_square_ref(const float *A, const float *B, float *C, int n) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= n) return;
  double s = 0.0;
  for (int p = 0; p < n; p++) s += (double)A[(size_t)i * n + p] * (double)B[(size_t)p * n + j];
  C[(size_t)i * n + j] = (float)s;
}
