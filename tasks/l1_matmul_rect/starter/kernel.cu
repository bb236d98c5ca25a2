#ifndef TS
#define TS 16
#endif
#ifndef RM
#define RM 4
#endif
// Shared-memory tiling with register blocking along rows: a TS x TS block computes a
// (TS*RM) x TS tile of C; thread (tx, ty) owns rows ty + i*TS (i < RM) of column tx.
// Each k step stages a (TS*RM) x TS slab of A and a TS x TS slab of B, zero-padded.
extern "C" __global__ void __launch_bounds__(TS * TS) matmul_rect(const float *__restrict__ A, const float *__restrict__ B,
                                                                  float *__restrict__ C, int m, int n, int k) {
  __shared__ float As[TS * RM][TS + 1];
  __shared__ float Bs[TS][TS];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row0 = blockIdx.y * (TS * RM);
  const int col = blockIdx.x * TS + tx;
  float acc[RM];
#pragma unroll
  for (int i = 0; i < RM; i++) acc[i] = 0.0f;
  for (int k0 = 0; k0 < k; k0 += TS) {
#pragma unroll
    for (int i = 0; i < RM; i++) {
      const int r = row0 + ty + i * TS, p = k0 + tx;
      As[ty + i * TS][tx] = (r < m && p < k) ? A[(size_t)r * k + p] : 0.0f;
    }
    {
      const int p = k0 + ty;
      Bs[ty][tx] = (p < k && col < n) ? B[(size_t)p * n + col] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TS; kk++) {
      const float b = Bs[kk][tx];
#pragma unroll
      for (int i = 0; i < RM; i++) acc[i] = fmaf(As[ty + i * TS][kk], b, acc[i]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < RM; i++) {
    const int r = row0 + ty + i * TS;
    if (r < m && col < n) C[(size_t)r * n + col] = acc[i];
  }
}
