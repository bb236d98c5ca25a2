// Tiled 3x3 "same" convolution + ReLU. A block of TW x TH threads computes a TH x TW patch of
// output pixels for FPT consecutive output channels (one pixel per thread, FPT accumulators).
// For each input channel it stages the (TH + 2) x (TW + 2) input halo tile (zeros outside the
// image) and the FPT x 9 weights in shared memory.
// grid = (ceil(w / TW), ceil(h / TH), n * ceil(f / FPT)).
#ifndef TW
#define TW 32
#endif
#ifndef TH
#define TH 8
#endif
#ifndef FPT
#define FPT 4
#endif

extern "C" __global__ void __launch_bounds__(TW * TH)
conv3x3_relu(const float *__restrict__ x, const float *__restrict__ weight, float *__restrict__ y,
             int n, int c, int f, int h, int w) {
  __shared__ float tile[TH + 2][TW + 2];
  __shared__ float wsh[FPT][9];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TW + tx;
  const int groups = (f + FPT - 1) / FPT;
  const int b = blockIdx.z / groups, o0 = (blockIdx.z % groups) * FPT;
  const int j0 = blockIdx.x * TW, i0 = blockIdx.y * TH;
  float acc[FPT];
#pragma unroll
  for (int q = 0; q < FPT; ++q) acc[q] = 0.0f;

  for (int ch = 0; ch < c; ++ch) {
    const float *xc = x + ((size_t)b * c + ch) * h * w;
    for (int e = tid; e < (TH + 2) * (TW + 2); e += TW * TH) {
      const int r = e / (TW + 2), q = e % (TW + 2);
      const int gi = i0 + r - 1, gj = j0 + q - 1;
      tile[r][q] = (gi >= 0 && gi < h && gj >= 0 && gj < w) ? xc[(size_t)gi * w + gj] : 0.0f;
    }
    for (int e = tid; e < FPT * 9; e += TW * TH) {
      const int o = o0 + e / 9;
      wsh[e / 9][e % 9] = o < f ? weight[((size_t)o * c + ch) * 9 + e % 9] : 0.0f;
    }
    __syncthreads();
    float v[9];
#pragma unroll
    for (int u = 0; u < 3; ++u)
#pragma unroll
      for (int t = 0; t < 3; ++t) v[u * 3 + t] = tile[ty + u][tx + t];
#pragma unroll
    for (int q = 0; q < FPT; ++q)
#pragma unroll
      for (int e = 0; e < 9; ++e) acc[q] = fmaf(v[e], wsh[q][e], acc[q]);
    __syncthreads();
  }

  const int i = i0 + ty, j = j0 + tx;
  if (i >= h || j >= w) return;
#pragma unroll
  for (int q = 0; q < FPT; ++q) {
    const int o = o0 + q;
    if (o < f) y[(((size_t)b * f + o) * h + i) * w + j] = fmaxf(acc[q], 0.0f);
  }
}
