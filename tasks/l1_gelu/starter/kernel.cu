#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 4
#endif
// Each block handles tiles of BLOCK*ITEMS elements (ITEMS coalesced loads per thread),
// striding over the vector by the whole grid; every access is bounds-checked.
extern "C" __global__ void __launch_bounds__(BLOCK) gelu(const float *__restrict__ x, float *__restrict__ y, long long n) {
  const long long tile = (long long)BLOCK * ITEMS;
  for (long long base = (long long)blockIdx.x * tile; base < n; base += (long long)gridDim.x * tile) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      long long j = base + (long long)i * BLOCK + threadIdx.x;
      if (j < n) {
        float v = x[j];
        y[j] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
      }
    }
  }
}
