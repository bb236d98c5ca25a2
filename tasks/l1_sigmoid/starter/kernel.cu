#ifndef BLOCK
#define BLOCK 256
#endif
// Grid-stride loop, float arithmetic with the fast exponential.
extern "C" __global__ void __launch_bounds__(BLOCK) sigmoid(const float *__restrict__ x, float *__restrict__ y, long long n) {
  for (long long i = blockIdx.x * (long long)BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK)
    y[i] = 1.0f / (1.0f + __expf(-x[i]));
}
