// Fused causal attention, one block per (query row i, batch*head): the block stages q_i in
// shared memory, computes the i + 1 visible scores into shared memory (one key per thread at
// a time), takes the block max and sum of exponentials, then each thread accumulates output
// features e = tid, tid + BLOCK, ... over the visible keys. No score matrix in global memory.
// Dynamic shared memory: (s + d) floats.
#ifndef BLOCK
#define BLOCK 128
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
causal_attention_row(const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                     float *__restrict__ out, int s, int d, float scale) {
  extern __shared__ float sh[];  // sh[0, s): scores / probabilities; sh[s, s + d): q_i
  __shared__ float red[32];
  float *p = sh, *qs = sh + s;
  const int i = blockIdx.x;
  const size_t bh = blockIdx.y;
  const float *kb = k + bh * s * d;
  const float *vb = v + bh * s * d;
  for (int e = threadIdx.x; e < d; e += BLOCK) qs[e] = q[(bh * s + i) * d + e];
  __syncthreads();

  float mx = NEG_INF;
  for (int j = threadIdx.x; j <= i; j += BLOCK) {
    const float *kj = kb + (size_t)j * d;
    float acc = 0.0f;
    for (int e = 0; e < d; ++e) acc = fmaf(qs[e], kj[e], acc);
    acc *= scale;
    p[j] = acc;
    mx = fmaxf(mx, acc);
  }
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= i; j += BLOCK) {
    const float w = __expf(p[j] - mx);
    p[j] = w;
    sum += w;
  }
  const float inv = 1.0f / block_sum(sum, red);  // its __syncthreads also publish p[]

  for (int e = threadIdx.x; e < d; e += BLOCK) {
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc = fmaf(p[j], vb[(size_t)j * d + e], acc);
    out[(bh * s + i) * d + e] = acc * inv;
  }
}
