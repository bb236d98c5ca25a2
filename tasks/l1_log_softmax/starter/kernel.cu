#ifndef WARPS
#define WARPS 4
#endif
// One warp per row (WARPS rows per block). Each lane keeps an online (max, sum) pair over
// its strided columns; the pairs are merged with shuffles, then the row is written.
#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void __launch_bounds__(WARPS * 32) log_softmax(const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp leaves together; no block barrier is used
  const float *xr = x + (size_t)row * cols;
  float *yr = y + (size_t)row * cols;
  float m = NEG_INF, s = 0.0f;
  for (int j = lane; j < cols; j += 32) {
    float v = xr[j];
    if (v > m) { s = s * __expf(m - v) + 1.0f; m = v; }
    else s += __expf(v - m);
  }
  // merge (m, s) across the warp; lanes with no columns hold (-inf, 0)
  for (int o = 16; o > 0; o >>= 1) {
    float om = __shfl_xor_sync(0xffffffffu, m, o);
    float os = __shfl_xor_sync(0xffffffffu, s, o);
    float nm = fmaxf(m, om);
    float a = (m == NEG_INF) ? 0.0f : s * __expf(m - nm);
    float b = (om == NEG_INF) ? 0.0f : os * __expf(om - nm);
    m = nm;
    s = a + b;
  }
  const float lse = m + __logf(s);
  for (int j = lane; j < cols; j += 32) yr[j] = xr[j] - lse;
}
