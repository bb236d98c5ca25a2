// Fused attention with an online softmax (FlashAttention-style, one pass over the keys).
// A block of WARPS warps handles WARPS consecutive query rows of one (batch, head), one
// warp per row. Keys and values are streamed in tiles of 32 rows through shared memory,
// shared by all warps of the block. For each tile, lane l scores key j0 + l; the warp then
// updates its running max m, running denominator l_sum and its output accumulator
// (lane owns features e = lane + 32 t, t < DMAX / 32) with the exp(m_old - m_new) rescale.
// Requires d <= DMAX. grid = (ceil(sq / WARPS), b * heads).
#ifndef WARPS
#define WARPS 4
#endif
#ifndef DMAX
#define DMAX 64
#endif
#define KT 32
#define NT (DMAX / 32)
#define NEG_INF __int_as_float(0xff800000u)

extern "C" __global__ void __launch_bounds__(WARPS * 32)
attention_online(const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                 float *__restrict__ out, int sq, int sk, int d, float scale) {
  __shared__ float ks[KT][DMAX + 1];
  __shared__ float vs[KT][DMAX + 1];
  __shared__ float qs[WARPS][DMAX];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const size_t bh = blockIdx.y;
  const int i = blockIdx.x * WARPS + warp;
  const bool valid = i < sq;  // invalid rows still take part in every barrier, then write nothing
  for (int e = lane; e < DMAX; e += 32) qs[warp][e] = (valid && e < d) ? q[(bh * sq + i) * d + e] : 0.0f;

  const float *kb = k + bh * sk * d;
  const float *vb = v + bh * sk * d;
  float m = NEG_INF, l_sum = 0.0f;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

  for (int j0 = 0; j0 < sk; j0 += KT) {
    __syncthreads();  // the previous tile is no longer read (and qs is published, first time)
    for (int idx = threadIdx.x; idx < KT * DMAX; idx += WARPS * 32) {
      const int r = idx / DMAX, c = idx % DMAX;
      const bool ok = j0 + r < sk && c < d;
      ks[r][c] = ok ? kb[(size_t)(j0 + r) * d + c] : 0.0f;
      vs[r][c] = ok ? vb[(size_t)(j0 + r) * d + c] : 0.0f;
    }
    __syncthreads();

    float sc = 0.0f;
    for (int e = 0; e < d; ++e) sc = fmaf(qs[warp][e], ks[lane][e], sc);
    sc = j0 + lane < sk ? sc * scale : NEG_INF;
    float mt = sc;
    for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
    const float m_new = fmaxf(m, mt);          // finite: key j0 is always valid
    const float corr = __expf(m - m_new);      // 0 on the first tile (m = -inf)
    const float p = __expf(sc - m_new);        // 0 for keys past sk
    float ps = p;
    for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
    l_sum = l_sum * corr + ps;
    m = m_new;
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] *= corr;
    for (int jj = 0; jj < KT; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t] = fmaf(pj, vs[jj][lane + 32 * t], acc[t]);
    }
  }

  if (!valid) return;
  const float inv = 1.0f / l_sum;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int e = lane + 32 * t;
    if (e < d) out[(bh * sq + i) * d + e] = acc[t] * inv;
  }
}
