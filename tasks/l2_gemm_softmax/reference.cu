// Naive reference in two kernels: z = x @ w (one thread per element, float accumulation),
// then one thread per row computes the softmax in double precision.
extern "C" __global__ void matmul_ref(const float *x, const float *w, float *z, int m, int n, int k) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += x[(size_t)i * k + p] * w[(size_t)p * n + j];
  z[(size_t)i * n + j] = acc;
}

extern "C" __global__ void softmax_rows_ref(const float *z, float *y, int m, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const float *row = z + (size_t)i * n;
  double mx = row[0];
  for (int j = 1; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
  double sum = 0.0;
  for (int j = 0; j < n; ++j) sum += exp((double)row[j] - mx);
  for (int j = 0; j < n; ++j) y[(size_t)i * n + j] = (float)(exp((double)row[j] - mx) / sum);
}
