// One block per row: pass 1 sums the row (mean), pass 2 sums squared deviations (variance,
// the row is re-read from L1/L2), pass 3 normalizes and applies the erf GELU. Block
// reductions use warp shuffles and a 32-entry shared array; every thread takes part.
#ifndef BLOCK
#define BLOCK 256
#endif

__device__ __forceinline__ float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  __syncthreads();  // red may still be read by the previous reduction
  if (lane == 0) red[wid] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_gelu(const float *__restrict__ x, const float *__restrict__ gamma, const float *__restrict__ beta,
               float *__restrict__ y, int d) {
  __shared__ float red[32];
  const float *row = x + (size_t)blockIdx.x * d;
  float *out = y + (size_t)blockIdx.x * d;
  float s = 0.0f;
  for (int j = threadIdx.x; j < d; j += BLOCK) s += row[j];
  const float mu = block_sum(s, red) / d;
  float v = 0.0f;
  for (int j = threadIdx.x; j < d; j += BLOCK) {
    const float t = row[j] - mu;
    v = fmaf(t, t, v);
  }
  const float rstd = rsqrtf(block_sum(v, red) / d + 1e-5f);
  for (int j = threadIdx.x; j < d; j += BLOCK) {
    const float t = (row[j] - mu) * rstd * gamma[j] + beta[j];
    out[j] = 0.5f * t * (1.0f + erff(t * 0.70710678118654752440f));
  }
}
