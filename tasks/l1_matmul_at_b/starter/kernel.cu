#ifndef TILE
#define TILE 16
#endif
// Shared-memory tiling for C = A^T B: each k step stages A[k0:k0+TILE, i0:i0+TILE] and
// B[k0:k0+TILE, j0:j0+TILE] (both read along their contiguous dimension, so coalesced),
// then C[i][j] += As[p][i] * Bs[p][j]. Out-of-range elements are zero.
extern "C" __global__ void __launch_bounds__(TILE * TILE) matmul_at_b(const float *__restrict__ A, const float *__restrict__ B,
                                                                      float *__restrict__ C, int m, int n, int k) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
  const int i = i0 + ty, j = j0 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += TILE) {
    const int p = k0 + ty;
    As[ty][tx] = (p < k && i0 + tx < m) ? A[(size_t)p * m + i0 + tx] : 0.0f;
    Bs[ty][tx] = (p < k && j < n) ? B[(size_t)p * n + j] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int pp = 0; pp < TILE; pp++) acc = fmaf(As[pp][ty], Bs[pp][tx], acc);
    __syncthreads();
  }
  if (i < m && j < n) C[(size_t)i * n + j] = acc;
}
