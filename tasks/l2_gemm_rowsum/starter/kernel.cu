// A shared-memory tiled GEMM whose epilogue applies bias + ReLU and sums its TILE columns of
// each row (shuffles within the TILE lanes that share a row); the per-tile partial sums go
// to a [m, tiles] scratch buffer, and a second kernel adds them up per row (deterministic,
// no atomics). Block: TILE x (TILE / RM) threads, each owns one column and RM rows.
#ifndef TILE
#define TILE 32
#endif
#ifndef RM
#define RM 4
#endif
#define ROWS_PER_PASS (TILE / RM)

extern "C" __global__ void __launch_bounds__(TILE * TILE / RM)
linear_relu_partial(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ bias,
                    float *__restrict__ part, int m, int n, int k) {
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
  // Epilogue: columns past n contribute 0. The TILE lanes with the same ty are consecutive
  // lanes of one warp (TILE divides 32 and the block has a multiple of 32 threads), so xor
  // shuffles with offsets < TILE stay inside the group; every lane takes part.
  const int col = col0 + tx;
  const float bv = col < n ? bias[col] : 0.0f;
  const int tiles = gridDim.x;
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    float v = col < n ? fmaxf(acc[i] + bv, 0.0f) : 0.0f;
    for (int o = TILE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int row = row0 + ty + i * ROWS_PER_PASS;
    if (tx == 0 && row < m) part[(size_t)row * tiles + blockIdx.x] = v;
  }
}

extern "C" __global__ void sum_partials(const float *__restrict__ part, float *__restrict__ y, int m, int tiles) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  float s = 0.0f;
  for (int t = 0; t < tiles; ++t) s += part[(size_t)i * tiles + t];
  y[i] = s;
}
