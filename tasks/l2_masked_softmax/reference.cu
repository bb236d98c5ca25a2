// Naive reference: one thread per row, in double precision.
extern "C" __global__ void masked_softmax_ref(const float *x, const int *len, float *y, int b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= b) return;
  const float *row = x + (size_t)i * n;
  int L = len[i];
  double mx = (double)row[0] * 0.125;
  for (int j = 1; j < L; ++j) mx = fmax(mx, (double)row[j] * 0.125);
  double sum = 0.0;
  for (int j = 0; j < L; ++j) sum += exp((double)row[j] * 0.125 - mx);
  for (int j = 0; j < n; ++j)
    y[(size_t)i * n + j] = j < L ? (float)(exp((double)row[j] * 0.125 - mx) / sum) : 0.0f;
}
