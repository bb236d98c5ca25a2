// One fused kernel: a shared-memory tiled GEMM over the concatenated reduction dimension
// [x | h] (isz + hsz) against [w_ih | w_hh], then bias + tanh in the epilogue; no
// intermediate in global memory. A block computes a TILE x TILE tile of h_new with
// (TILE / RN) x TILE threads: thread (tx, ty) owns row ty and the RN columns tx, tx + TILE/RN, ...
// Operand tiles are KT = 16 deep along the reduction dimension, zero-padded past the edges.
#ifndef TILE
#define TILE 32
#endif
#ifndef RN
#define RN 2
#endif
#define KT 16
#define COLS_PER_PASS (TILE / RN)
#define NTHREADS (TILE * TILE / RN)

extern "C" __global__ void __launch_bounds__(NTHREADS)
rnn_cell(const float *__restrict__ x, const float *__restrict__ h, const float *__restrict__ w_ih,
         const float *__restrict__ w_hh, const float *__restrict__ b_ih, const float *__restrict__ b_hh,
         float *__restrict__ h_new, int batch, int isz, int hsz) {
  __shared__ float as[TILE][KT + 1];  // as[row][p]: [x | h][row0 + row, k0 + p]
  __shared__ float ws[KT][TILE + 1];  // ws[p][col]: [w_ih | w_hh][col0 + col, k0 + p]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * COLS_PER_PASS + tx;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  const int ktot = isz + hsz;
  float acc[RN];
#pragma unroll
  for (int j = 0; j < RN; ++j) acc[j] = 0.0f;

  for (int k0 = 0; k0 < ktot; k0 += KT) {
    for (int e = tid; e < TILE * KT; e += NTHREADS) {
      const int rr = e / KT, p = e % KT, gp = k0 + p;
      const int gr = row0 + rr, gc = col0 + rr;
      float av = 0.0f, wv = 0.0f;
      if (gp < isz) {
        if (gr < batch) av = x[(size_t)gr * isz + gp];
        if (gc < hsz) wv = w_ih[(size_t)gc * isz + gp];
      } else if (gp < ktot) {
        const int q = gp - isz;
        if (gr < batch) av = h[(size_t)gr * hsz + q];
        if (gc < hsz) wv = w_hh[(size_t)gc * hsz + q];
      }
      as[rr][p] = av;
      ws[p][rr] = wv;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < KT; ++p) {
      const float a = as[ty][p];
#pragma unroll
      for (int j = 0; j < RN; ++j) acc[j] = fmaf(a, ws[p][tx + j * COLS_PER_PASS], acc[j]);
    }
    __syncthreads();
  }

  const int row = row0 + ty;
  if (row >= batch) return;
#pragma unroll
  for (int j = 0; j < RN; ++j) {
    const int col = col0 + tx + j * COLS_PER_PASS;
    if (col < hsz) h_new[(size_t)row * hsz + col] = tanhf(acc[j] + b_ih[col] + b_hh[col]);
  }
}
