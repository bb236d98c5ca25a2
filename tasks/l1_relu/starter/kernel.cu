#ifndef BLOCK
#define BLOCK 256
#endif
// One thread per element; a grid-stride loop keeps any n correct.
extern "C" __global__ void __launch_bounds__(BLOCK) relu(const float *x, float *y, long long n) {
  for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK)
    y[i] = fmaxf(x[i], 0.0f);
}
