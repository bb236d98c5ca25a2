#ifndef BLOCK
#define BLOCK 256
#endif
// One block per sample, a single pass over the logits: each thread keeps an online
// (max, sum of exp relative to max) pair; the block reduces the maxima, rescales each
// thread's sum to the common maximum, and reduces the sums. BLOCK is a multiple of 32.
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK) cross_entropy(const float *__restrict__ logits, const int *__restrict__ target,
                                                                  float *__restrict__ loss, int n, int c) {
  __shared__ float sh[32];
  if (blockIdx.x >= n) return;
  const float *row = logits + (size_t)blockIdx.x * c;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  float m = NEG_INF, s = 0.0f;
  for (int j = threadIdx.x; j < c; j += BLOCK) {
    const float v = row[j];
    if (v > m) { s = s * __expf(m - v) + 1.0f; m = v; }
    else s += __expf(v - m);
  }
  // block maximum
  float M = warp_max(m);
  if (lane == 0) sh[w] = M;
  __syncthreads();
  M = warp_max(lane < BLOCK / 32 ? sh[lane] : NEG_INF);
  __syncthreads();
  // block sum of the rescaled partial sums (threads without columns hold s = 0)
  float S = warp_sum(s > 0.0f ? s * __expf(m - M) : 0.0f);
  if (lane == 0) sh[w] = S;
  __syncthreads();
  if (w == 0) {
    S = warp_sum(lane < BLOCK / 32 ? sh[lane] : 0.0f);
    if (lane == 0) loss[blockIdx.x] = M + __logf(S) - row[target[blockIdx.x]];
  }
}
