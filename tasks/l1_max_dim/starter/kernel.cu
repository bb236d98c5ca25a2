#ifndef BLOCK
#define BLOCK 256
#endif
// One block per row: strided per-thread maxima, a warp shuffle butterfly, then the warp
// results through shared memory. BLOCK is a multiple of 32, so all warps are full.
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK) max_dim(const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
  __shared__ float sh[32];
  if (blockIdx.x >= rows) return;
  const float *xr = x + (size_t)blockIdx.x * cols;
  float m = NEG_INF;
  for (int j = threadIdx.x; j < cols; j += BLOCK) m = fmaxf(m, xr[j]);
  m = warp_max(m);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) sh[w] = m;
  __syncthreads();
  if (w == 0) {
    m = warp_max(lane < BLOCK / 32 ? sh[lane] : NEG_INF);
    if (lane == 0) y[blockIdx.x] = m;
  }
}
