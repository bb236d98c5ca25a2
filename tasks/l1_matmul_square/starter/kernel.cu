#ifndef TILE
#define TILE 16
#endif
// Classic shared-memory tiling: a TILE x TILE block computes a TILE x TILE tile of C,
// stepping through k in TILE-wide slabs of A and B staged in shared memory. Out-of-range
// elements are loaded as zero, so any n works.
extern "C" __global__ void __launch_bounds__(TILE * TILE) matmul_square(const float *__restrict__ A, const float *__restrict__ B,
                                                                        float *__restrict__ C, int n) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += TILE) {
    As[ty][tx] = (row < n && k0 + tx < n) ? A[(size_t)row * n + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < n && col < n) ? B[(size_t)(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TILE; kk++) acc = fmaf(As[ty][kk], Bs[kk][tx], acc);
    __syncthreads();
  }
  if (row < n && col < n) C[(size_t)row * n + col] = acc;
}
