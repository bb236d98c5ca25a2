#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
// Each thread handles ITEMS elements BLOCK apart inside a tile of BLOCK*ITEMS; the grid
// strides over tiles. Stable form: max(x, 0) + log1p(exp(-|x|)).
extern "C" __global__ void __launch_bounds__(BLOCK) softplus(const float *__restrict__ x, float *__restrict__ y, long long n) {
  const long long tile = (long long)BLOCK * ITEMS;
  for (long long base = (long long)blockIdx.x * tile; base < n; base += (long long)gridDim.x * tile) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      long long j = base + (long long)i * BLOCK + threadIdx.x;
      if (j < n) {
        float v = x[j];
        y[j] = fmaxf(v, 0.0f) + log1pf(__expf(-fabsf(v)));
      }
    }
  }
}
