#ifndef BLOCK
#define BLOCK 256
#endif
// Two deterministic passes, no atomics:
//  mse_partial: each block sums squared differences over a grid-stride range (float per
//               thread, shuffle + shared-memory block reduction) into partial[blockIdx.x];
//  mse_final:   one block adds the partials and writes sum / n.
// BLOCK is a multiple of 32, so every warp is full.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  return warp_sum(lane < BLOCK / 32 ? sh[lane] : 0.0f);  // valid in every thread
}

extern "C" __global__ void __launch_bounds__(BLOCK) mse_partial(const float *__restrict__ pred, const float *__restrict__ target,
                                                                float *__restrict__ partial, long long n) {
  float s = 0.0f;
  for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
    const float d = pred[i] - target[i];
    s = fmaf(d, d, s);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(BLOCK) mse_final(const float *__restrict__ partial, int nparts,
                                                              float *__restrict__ loss, long long n) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < nparts; i += BLOCK) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) loss[0] = (float)((double)s / (double)n);
}
