// Naive reference in three kernels over the [b*heads, s, s] score matrices:
//   1. P[bh, i, j] = (q_i . k_j) / sqrt(d) for j <= i (one thread per score; j > i untouched)
//   2. one thread per row turns P[bh, i, 0..i] into softmax probabilities (double)
//   3. out[bh, i, e] = sum_{j <= i} P[bh, i, j] * v[bh, j, e] (one thread per output)
extern "C" __global__ void causal_scores_ref(const float *q, const float *k, float *P, int s, int d, float scale) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  size_t bh = blockIdx.z;
  if (i >= s || j >= s || j > i) return;
  const float *qi = q + (bh * s + i) * d;
  const float *kj = k + (bh * s + j) * d;
  float acc = 0.0f;
  for (int e = 0; e < d; ++e) acc += qi[e] * kj[e];
  P[(bh * s + i) * s + j] = acc * scale;
}

extern "C" __global__ void causal_softmax_ref(float *P, int rows, int s) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;  // r = bh * s + i
  if (r >= rows) return;
  int i = r % s;
  float *row = P + (size_t)r * s;
  double mx = row[0];
  for (int j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
  double sum = 0.0;
  for (int j = 0; j <= i; ++j) sum += exp((double)row[j] - mx);
  for (int j = 0; j <= i; ++j) row[j] = (float)(exp((double)row[j] - mx) / sum);
}

extern "C" __global__ void causal_pv_ref(const float *P, const float *v, float *out, int s, int d) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  size_t bh = blockIdx.z;
  if (i >= s || e >= d) return;
  const float *row = P + (bh * s + i) * s;
  float acc = 0.0f;
  for (int j = 0; j <= i; ++j) acc += row[j] * v[(bh * s + j) * d + e];
  out[(bh * s + i) * d + e] = acc;
}
