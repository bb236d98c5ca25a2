// One warp per row, WARPS rows per block: the lanes walk the row together (coalesced),
// UNROLL independent loads in flight per lane, then a shuffle reduction; lane 0 applies the
// bias and tanh. Rows past m exit as a whole warp, before any shuffle.
#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

extern "C" __global__ void __launch_bounds__(WARPS * 32)
gemv_tanh(const float *__restrict__ W, const float *__restrict__ x, const float *__restrict__ b,
          float *__restrict__ y, int m, int k) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= m) return;
  const float *wr = W + (size_t)row * k;
  float acc[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) acc[u] = 0.0f;
  int p = lane;
  for (; p + 32 * (UNROLL - 1) < k; p += 32 * UNROLL) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = fmaf(wr[p + 32 * u], x[p + 32 * u], acc[u]);
  }
  for (; p < k; p += 32) acc[0] = fmaf(wr[p], x[p], acc[0]);
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) s += acc[u];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = tanhf(s + b[row]);
}
