// One warp per row, WARPS rows per block. Each lane keeps up to VPT values of z = x + bias in
// registers (elements lane, lane + 32, ...), so a row is read from memory once when
// d <= 32 * VPT; longer rows fall back to a loop that re-reads the row. Mean and variance
// (two-pass, from the registers) use warp shuffles only; no shared memory.
#ifndef WARPS
#define WARPS 4
#endif
#ifndef VPT
#define VPT 64
#endif

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
bias_layernorm(const float *__restrict__ x, const float *__restrict__ bias, const float *__restrict__ gamma,
               const float *__restrict__ beta, float *__restrict__ y, int m, int d) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= m) return;  // whole warp leaves together: no shuffle is left half-populated
  const float *xr = x + (size_t)row * d;
  float *yr = y + (size_t)row * d;
  const float inv_d = 1.0f / d;
  if (d <= 32 * VPT) {
    float z[VPT];
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int j = lane + 32 * t;
      z[t] = j < d ? xr[j] + bias[j] : 0.0f;
      s += z[t];
    }
    const float mu = warp_sum(s) * inv_d;
    float v = 0.0f;
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int j = lane + 32 * t;
      const float c = j < d ? z[t] - mu : 0.0f;
      v = fmaf(c, c, v);
    }
    const float rstd = rsqrtf(warp_sum(v) * inv_d + 1e-6f);
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int j = lane + 32 * t;
      if (j < d) yr[j] = (z[t] - mu) * rstd * gamma[j] + beta[j];
    }
  } else {
    float s = 0.0f;
    for (int j = lane; j < d; j += 32) s += xr[j] + bias[j];
    const float mu = warp_sum(s) * inv_d;
    float v = 0.0f;
    for (int j = lane; j < d; j += 32) {
      const float c = xr[j] + bias[j] - mu;
      v = fmaf(c, c, v);
    }
    const float rstd = rsqrtf(warp_sum(v) * inv_d + 1e-6f);
    for (int j = lane; j < d; j += 32) yr[j] = (xr[j] + bias[j] - mu) * rstd * gamma[j] + beta[j];
  }
}
