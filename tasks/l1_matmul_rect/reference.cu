// One thread per output element, a plain dot product accumulated in double.
extern "C" __global__ void matmul_rect_ref(const float *A, const float *B, float *C, int m, int n, int k) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  double s = 0.0;
  for (int p = 0; p < k; p++) s += (double)A[(size_t)i * k + p] * (double)B[(size_t)p * n + j];
  C[(size_t)i * n + j] = (float)s;
}
