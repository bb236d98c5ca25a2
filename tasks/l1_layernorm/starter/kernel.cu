#ifndef BLOCK
#define BLOCK 256
#endif
// One block per row, two-pass statistics in float: block sum for the mean, block sum of
// squared deviations for the variance, then the affine write. BLOCK is a multiple of 32.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = warp_sum(lane < BLOCK / 32 ? sh[lane] : 0.0f);
  __syncthreads();  // sh is reused by the next reduction
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK) layernorm(const float *__restrict__ x, const float *__restrict__ weight,
                                                              const float *__restrict__ bias, float *__restrict__ y,
                                                              int rows, int cols) {
  __shared__ float sh[32];
  if (blockIdx.x >= rows) return;
  const float *xr = x + (size_t)blockIdx.x * cols;
  float *yr = y + (size_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int j = threadIdx.x; j < cols; j += BLOCK) s += xr[j];
  const float mu = block_sum(s, sh) / (float)cols;
  float v = 0.0f;
  for (int j = threadIdx.x; j < cols; j += BLOCK) { float d = xr[j] - mu; v += d * d; }
  const float rstd = rsqrtf(block_sum(v, sh) / (float)cols + 1e-5f);
  for (int j = threadIdx.x; j < cols; j += BLOCK) yr[j] = (xr[j] - mu) * rstd * weight[j] + bias[j];
}
