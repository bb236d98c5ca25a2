// Grid-stride loop; each thread handles UNROLL elements per step, BLOCK apart (so a warp's
// accesses stay coalesced), with all loads issued before the math.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_mul_add(const float *__restrict__ x, const float *__restrict__ y, const float *__restrict__ z,
             float *__restrict__ out, long long n) {
  const long long step = (long long)gridDim.x * BLOCK * UNROLL;
  for (long long base = (long long)blockIdx.x * BLOCK * UNROLL + threadIdx.x; base < n; base += step) {
    float a[UNROLL], g[UNROLL], r[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = base + (long long)u * BLOCK;
      const bool ok = i < n;
      a[u] = ok ? x[i] : 0.0f;
      g[u] = ok ? y[i] : 0.0f;
      r[u] = ok ? z[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = base + (long long)u * BLOCK;
      if (i < n) out[i] = __fdividef(a[u], 1.0f + __expf(-a[u])) * g[u] + r[u];
    }
  }
}
