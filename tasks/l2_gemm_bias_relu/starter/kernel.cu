// Shared-memory tiled GEMM with the bias + ReLU epilogue fused in.
// A block computes a TILE x TILE tile of y with TILE x (TILE / RM) threads; each thread
// owns one column and RM rows (ty, ty + TILE/RM, ...). Tiles of x and w are staged in
// shared memory, zero-padded past the matrix edges.
#ifndef TILE
#define TILE 32
#endif
#ifndef RM
#define RM 4
#endif
#define ROWS_PER_PASS (TILE / RM)

extern "C" __global__ void __launch_bounds__(TILE * TILE / RM)
gemm_bias_relu(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ bias,
               float *__restrict__ y, int m, int n, int k) {
  __shared__ float xs[TILE][TILE + 1];  // xs[r][p] = x[row0 + r, k0 + p]
  __shared__ float ws[TILE][TILE + 1];  // ws[p][c] = w[k0 + p, col0 + c]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  float acc[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) acc[i] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += TILE) {
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int r = ty + i * ROWS_PER_PASS;
      const int gr = row0 + r, gp = k0 + tx;
      xs[r][tx] = (gr < m && gp < k) ? x[(size_t)gr * k + gp] : 0.0f;
      const int wp = k0 + r, gc = col0 + tx;
      ws[r][tx] = (wp < k && gc < n) ? w[(size_t)wp * n + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int p = 0; p < TILE; ++p) {
      const float b = ws[p][tx];
#pragma unroll
      for (int i = 0; i < RM; ++i) acc[i] = fmaf(xs[ty + i * ROWS_PER_PASS][p], b, acc[i]);
    }
    __syncthreads();
  }

  const int col = col0 + tx;
  if (col >= n) return;
  const float bv = bias[col];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int row = row0 + ty + i * ROWS_PER_PASS;
    if (row < m) y[(size_t)row * n + col] = fmaxf(acc[i] + bv, 0.0f);
  }
}
