// Naive reference, plain two-pass softmax over materialized scores [b*heads, sq, sk]:
//   1. S[bh, i, j] = (q_i . k_j) * scale, one thread per score
//   2. one thread per row: m = max_j S, S <- exp(S - m) in place, inv[row] = 1 / sum (double)
//   3. out[bh, i, e] = inv[row] * sum_j S[bh, i, j] * v[bh, j, e], one thread per output
extern "C" __global__ void attn_scores_ref(const float *q, const float *k, float *S, int sq, int sk, int d, float scale) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  size_t bh = blockIdx.z;
  if (i >= sq || j >= sk) return;
  const float *qi = q + (bh * sq + i) * d;
  const float *kj = k + (bh * sk + j) * d;
  float acc = 0.0f;
  for (int e = 0; e < d; ++e) acc += qi[e] * kj[e];
  S[(bh * sq + i) * sk + j] = acc * scale;
}

extern "C" __global__ void attn_exp_rows_ref(float *S, double *inv, int rows, int sk) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float *row = S + (size_t)r * sk;
  double mx = row[0];
  for (int j = 1; j < sk; ++j) mx = row[j] > mx ? row[j] : mx;
  double sum = 0.0;
  for (int j = 0; j < sk; ++j) {
    double p = exp((double)row[j] - mx);
    row[j] = (float)p;
    sum += p;
  }
  inv[r] = 1.0 / sum;
}

extern "C" __global__ void attn_pv_ref(const float *S, const double *inv, const float *v, float *out, int sq, int sk, int d) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  size_t bh = blockIdx.z;
  if (i >= sq || e >= d) return;
  size_t r = bh * sq + i;
  const float *row = S + r * sk;
  double acc = 0.0;
  for (int j = 0; j < sk; ++j) acc += row[j] * v[(bh * sk + j) * d + e];
  out[r * d + e] = (float)(acc * inv[r]);
}
