#ifndef BLOCK
#define BLOCK 256
#endif
// One block per row: strided partial sums, then a shared-memory tree.
extern "C" __global__ void rowsum(const float *x, float *y, int rows, int cols) {
  __shared__ float part[BLOCK];
  int r = blockIdx.x;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) acc += x[(size_t)r * cols + c];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[r] = part[0];
}
