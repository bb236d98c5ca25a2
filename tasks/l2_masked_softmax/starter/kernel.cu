// One block per row: block-wide max and sum over the valid prefix (warp shuffles + a small
// shared array), then a pass that writes the probabilities and zeros the padded tail.
#ifndef BLOCK
#define BLOCK 256
#endif
#define NEG_INF __int_as_float(0xff800000u)

__device__ __forceinline__ float block_max(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? red[lane] : NEG_INF;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
masked_softmax(const float *__restrict__ x, const int *__restrict__ len, float *__restrict__ y, int n) {
  __shared__ float red[32];
  const float *row = x + (size_t)blockIdx.x * n;
  float *out = y + (size_t)blockIdx.x * n;
  const int L = len[blockIdx.x];
  const float scale = 0.125f;
  float mx = NEG_INF;
  for (int j = threadIdx.x; j < L; j += BLOCK) mx = fmaxf(mx, row[j] * scale);
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < L; j += BLOCK) sum += __expf(row[j] * scale - mx);
  const float inv = 1.0f / block_sum(sum, red);
  for (int j = threadIdx.x; j < n; j += BLOCK) out[j] = j < L ? __expf(row[j] * scale - mx) * inv : 0.0f;
}
