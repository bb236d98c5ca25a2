// Batched shared-memory tiled GEMM with a fused ReLU: block (TILE, TILE) computes a
// TILE x TILE tile of one matrix of the batch (blockIdx.z), one output per thread; tiles are
// zero-padded past the edges.
#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
bmm_relu(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c, int m, int n, int k) {
  __shared__ float as[TILE][TILE + 1];
  __shared__ float bs[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int i = blockIdx.y * TILE + ty, j = blockIdx.x * TILE + tx;
  const size_t t = blockIdx.z;
  const float *at = a + t * m * k;
  const float *bt = b + t * k * n;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += TILE) {
    as[ty][tx] = (i < m && k0 + tx < k) ? at[(size_t)i * k + k0 + tx] : 0.0f;
    bs[ty][tx] = (k0 + ty < k && j < n) ? bt[(size_t)(k0 + ty) * n + j] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < TILE; ++p) acc = fmaf(as[ty][p], bs[p][tx], acc);
    __syncthreads();
  }
  if (i < m && j < n) c[(t * m + i) * n + j] = fmaxf(acc, 0.0f);
}
