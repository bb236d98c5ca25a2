#ifndef WARPS
#define WARPS 8
#endif
// One warp per row (WARPS rows per block). Each lane scans its strided columns keeping the
// first maximum; the (value, index) pairs are merged with shuffles, ties to the lower index.
#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void __launch_bounds__(WARPS * 32) argmax_dim(const float *__restrict__ x, long long *__restrict__ idx,
                                                                    int rows, int cols) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform; no block barrier is used
  const float *xr = x + (size_t)row * cols;
  float best = NEG_INF;
  int bi = 0x7fffffff;  // lanes without columns lose every comparison
  for (int j = lane; j < cols; j += 32) {
    float v = xr[j];
    if (v > best) { best = v; bi = j; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
  }
  if (lane == 0) idx[row] = bi;
}
