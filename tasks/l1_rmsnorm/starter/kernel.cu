#ifndef WARPS
#define WARPS 8
#endif
// One warp per row (WARPS rows per block): each lane sums squares over its strided
// columns, a shuffle butterfly gives every lane the row total, then the lanes write.
extern "C" __global__ void __launch_bounds__(WARPS * 32) rmsnorm(const float *__restrict__ x, const float *__restrict__ weight,
                                                                 float *__restrict__ y, int rows, int cols) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform; no block barrier below
  const float *xr = x + (size_t)row * cols;
  float *yr = y + (size_t)row * cols;
  float ss = 0.0f;
  for (int j = lane; j < cols; j += 32) { float v = xr[j]; ss += v * v; }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / (float)cols + 1e-6f);
  for (int j = lane; j < cols; j += 32) yr[j] = xr[j] * inv * weight[j];
}
