// Shared-memory tiled GEMM (x @ w^T) with the bias + tanh-GELU epilogue fused in.
// A block computes a TILE x TILE tile of y with TILE x (TILE / RM) threads; each thread owns
// one output column and RM rows. Both operands are row-major in k, so both tiles are loaded
// along k (coalesced) and zero-padded past the edges; the w tile is stored as ws[col][p].
#ifndef TILE
#define TILE 32
#endif
#ifndef RM
#define RM 4
#endif
#define ROWS_PER_PASS (TILE / RM)

__device__ __forceinline__ float gelu_tanh(float t) {
  return 0.5f * t * (1.0f + tanhf(0.7978845608028654f * (t + 0.044715f * t * t * t)));
}

extern "C" __global__ void __launch_bounds__(TILE * TILE / RM)
linear_gelu(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
            float *__restrict__ y, int m, int n, int k) {
  __shared__ float xs[TILE][TILE + 1];  // xs[r][p] = x[row0 + r, k0 + p]
  __shared__ float ws[TILE][TILE + 1];  // ws[c][p] = w[col0 + c, k0 + p]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  float acc[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) acc[i] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += TILE) {
    const int gp = k0 + tx;
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int r = ty + i * ROWS_PER_PASS;
      const int gr = row0 + r, gc = col0 + r;
      xs[r][tx] = (gr < m && gp < k) ? x[(size_t)gr * k + gp] : 0.0f;
      ws[r][tx] = (gc < n && gp < k) ? w[(size_t)gc * k + gp] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int p = 0; p < TILE; ++p) {
      const float wv = ws[tx][p];
#pragma unroll
      for (int i = 0; i < RM; ++i) acc[i] = fmaf(xs[ty + i * ROWS_PER_PASS][p], wv, acc[i]);
    }
    __syncthreads();
  }

  const int col = col0 + tx;
  if (col >= n) return;
  const float bv = b[col];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int row = row0 + ty + i * ROWS_PER_PASS;
    if (row < m) y[(size_t)row * n + col] = gelu_tanh(acc[i] + bv);
  }
}
