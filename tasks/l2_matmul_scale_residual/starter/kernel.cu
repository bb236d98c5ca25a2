// Shared-memory tiled GEMM (x @ w^T) with the scale + residual epilogue. A block computes a
// TILE x TILE tile with (TILE / RN) x TILE threads: thread (tx, ty) owns row ty and the RN
// columns tx, tx + TILE/RN, ... of the tile. Tiles are staged along k with a fixed depth of
// KT = 16, zero-padded past the edges.
#ifndef TILE
#define TILE 32
#endif
#ifndef RN
#define RN 2
#endif
#define KT 16
#define COLS_PER_PASS (TILE / RN)
#define NTHREADS (TILE * TILE / RN)

extern "C" __global__ void __launch_bounds__(NTHREADS)
matmul_scale_residual(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ r,
                      float *__restrict__ y, int m, int n, int k) {
  __shared__ float xs[TILE][KT + 1];  // xs[row][p] = x[row0 + row, k0 + p]
  __shared__ float ws[KT][TILE + 1];  // ws[p][col] = w[col0 + col, k0 + p]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * COLS_PER_PASS + tx;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  float acc[RN];
#pragma unroll
  for (int j = 0; j < RN; ++j) acc[j] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += KT) {
    // TILE * KT elements of each operand; consecutive threads walk along k (coalesced).
    for (int e = tid; e < TILE * KT; e += NTHREADS) {
      const int rr = e / KT, p = e % KT, gp = k0 + p;
      const int gr = row0 + rr, gc = col0 + rr;
      xs[rr][p] = (gr < m && gp < k) ? x[(size_t)gr * k + gp] : 0.0f;
      ws[p][rr] = (gc < n && gp < k) ? w[(size_t)gc * k + gp] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < KT; ++p) {
      const float a = xs[ty][p];
#pragma unroll
      for (int j = 0; j < RN; ++j) acc[j] = fmaf(a, ws[p][tx + j * COLS_PER_PASS], acc[j]);
    }
    __syncthreads();
  }

  const int row = row0 + ty;
  if (row >= m) return;
#pragma unroll
  for (int j = 0; j < RN; ++j) {
    const int col = col0 + tx + j * COLS_PER_PASS;
    if (col < n) {
      const size_t o = (size_t)row * n + col;
      y[o] = r[o] + 0.5f * acc[j];
    }
  }
}
