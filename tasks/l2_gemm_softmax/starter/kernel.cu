// Two kernels: a shared-memory tiled GEMM writes the logits into y, then one block per row
// turns the row into a softmax in place (max, sum of exponentials, normalise), with warp
// shuffles and a shared-memory step for the block reductions.
#ifndef TILE
#define TILE 32
#endif
#ifndef RM
#define RM 4
#endif
#ifndef SBLOCK
#define SBLOCK 256
#endif
#define ROWS_PER_PASS (TILE / RM)
#define NEG_INF __int_as_float(0xff800000u)

extern "C" __global__ void __launch_bounds__(TILE * TILE / RM)
matmul_tiled(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ z, int m, int n, int k) {
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
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int row = row0 + ty + i * ROWS_PER_PASS;
    if (row < m) z[(size_t)row * n + col] = acc[i];
  }
}

// Every thread of the block must call these (SBLOCK is a multiple of 32); all get the result.
__device__ __forceinline__ float block_max(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[wid] = v;
  __syncthreads();
  v = lane < SBLOCK / 32 ? red[lane] : NEG_INF;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  v = lane < SBLOCK / 32 ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(SBLOCK) softmax_rows_inplace(float *__restrict__ y, int n) {
  __shared__ float red[32];
  float *row = y + (size_t)blockIdx.x * n;
  float mx = NEG_INF;
  for (int j = threadIdx.x; j < n; j += SBLOCK) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += SBLOCK) sum += __expf(row[j] - mx);
  sum = block_sum(sum, red);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < n; j += SBLOCK) row[j] = __expf(row[j] - mx) * inv;
}
