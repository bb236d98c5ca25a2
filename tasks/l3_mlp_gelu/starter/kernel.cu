// One shared-memory tiled GEMM kernel used for both layers: out = act(in @ w + bias), with
// act = exact GELU when gelu != 0. A block computes a TILE x TILE tile with TILE x (TILE / RM)
// threads; each thread owns one column and RM rows. Tiles are zero-padded past the edges.
#ifndef TILE
#define TILE 32
#endif
#ifndef RM
#define RM 4
#endif
#define ROWS_PER_PASS (TILE / RM)

extern "C" __global__ void __launch_bounds__(TILE * TILE / RM)
linear_act(const float *__restrict__ in, const float *__restrict__ w, const float *__restrict__ bias,
           float *__restrict__ out, int m, int n, int k, int gelu) {
  __shared__ float as[TILE][TILE + 1];  // as[r][p] = in[row0 + r, k0 + p]
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
      as[r][tx] = (gr < m && gp < k) ? in[(size_t)gr * k + gp] : 0.0f;
      const int wp = k0 + r, gc = col0 + tx;
      ws[r][tx] = (wp < k && gc < n) ? w[(size_t)wp * n + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int p = 0; p < TILE; ++p) {
      const float bv = ws[p][tx];
#pragma unroll
      for (int i = 0; i < RM; ++i) acc[i] = fmaf(as[ty + i * ROWS_PER_PASS][p], bv, acc[i]);
    }
    __syncthreads();
  }
  const int col = col0 + tx;
  if (col >= n) return;
  const float bv = bias[col];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int row = row0 + ty + i * ROWS_PER_PASS;
    if (row < m) {
      float t = acc[i] + bv;
      if (gelu) t = 0.5f * t * (1.0f + erff(t * 0.70710678118654752440f));
      out[(size_t)row * n + col] = t;
    }
  }
}
