#ifndef WARPS
#define WARPS 8
#endif
// One warp per row (WARPS rows per block): lanes read the row with coalesced strided
// loads, accumulate in float, and a shuffle tree sums the 32 partial dot products.
extern "C" __global__ void __launch_bounds__(WARPS * 32) matvec(const float *__restrict__ A, const float *__restrict__ x,
                                                                float *__restrict__ y, int m, int n) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= m) return;  // warp-uniform; no block barrier is used
  const float *a = A + (size_t)row * n;
  float s = 0.0f;
  for (int j = lane; j < n; j += 32) s = fmaf(a[j], __ldg(x + j), s);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = s;
}
