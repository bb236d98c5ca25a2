// One block per row; each thread sums squares of a strided slice of the row, then a
// block reduction (warp shuffles + a 32-entry shared array) and thread 0 takes the root.
#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void __launch_bounds__(BLOCK) row_l2norm(const float *__restrict__ x, float *__restrict__ y, int k) {
  __shared__ float red[32];
  const float *row = x + (size_t)blockIdx.x * k;
  float s0 = 0.0f, s1 = 0.0f;
  int j = threadIdx.x;
  for (; j + BLOCK < k; j += 2 * BLOCK) {
    const float a = row[j], b = row[j + BLOCK];
    s0 = fmaf(a, a, s0);
    s1 = fmaf(b, b, s1);
  }
  if (j < k) s0 = fmaf(row[j], row[j], s0);
  float v = s0 + s1;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  if (lane == 0) red[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = lane < BLOCK / 32 ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) y[blockIdx.x] = sqrtf(v);
  }
}
