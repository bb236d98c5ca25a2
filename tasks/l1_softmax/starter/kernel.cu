#ifndef BLOCK
#define BLOCK 256
#endif
// One block per row: a max reduction, a sum-of-exp reduction, then the normalized write.
// BLOCK is a multiple of 32, so every warp is full and the 0xffffffff shuffles are legal.
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Every thread of the block calls these and gets the block-wide result.
__device__ __forceinline__ float block_max(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = warp_max(lane < BLOCK / 32 ? sh[lane] : NEG_INF);
  __syncthreads();  // sh is reused by the next reduction
  return v;
}
__device__ __forceinline__ float block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = warp_sum(lane < BLOCK / 32 ? sh[lane] : 0.0f);
  __syncthreads();
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK) softmax(const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
  __shared__ float sh[32];
  if (blockIdx.x >= rows) return;  // whole block leaves together
  const float *xr = x + (size_t)blockIdx.x * cols;
  float *yr = y + (size_t)blockIdx.x * cols;
  float m = NEG_INF;
  for (int j = threadIdx.x; j < cols; j += BLOCK) m = fmaxf(m, xr[j]);
  m = block_max(m, sh);
  float s = 0.0f;
  for (int j = threadIdx.x; j < cols; j += BLOCK) s += __expf(xr[j] - m);
  s = block_sum(s, sh);
  const float inv = 1.0f / s;
  for (int j = threadIdx.x; j < cols; j += BLOCK) yr[j] = __expf(xr[j] - m) * inv;
}
