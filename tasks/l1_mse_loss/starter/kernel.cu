#ifndef BLOCK
#define BLOCK 256
#endif
// One block of BLOCK threads per row: each thread adds the squared differences of a strided
// slice of the row in float (coalesced: neighbouring threads read neighbouring columns);
// the block's sums meet in a warp-shuffle tree and a shared-memory tree, and thread 0 writes
// sum / cols. No atomics, deterministic. BLOCK is a multiple of 32, so every warp is full.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK) mse_rows(const float *__restrict__ pred, const float *__restrict__ target,
                                                             float *__restrict__ loss, int cols) {
  __shared__ float sh[32];
  const size_t base = (size_t)blockIdx.x * cols;
  const float *p = pred + base, *q = target + base;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) {
    const float d = p[c] - q[c];
    s = fmaf(d, d, s);
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  s = warp_sum(s);
  if (lane == 0) sh[w] = s;
  __syncthreads();
  if (w == 0) {
    s = warp_sum(lane < BLOCK / 32 ? sh[lane] : 0.0f);
    if (lane == 0) loss[blockIdx.x] = s / (float)cols;
  }
}
