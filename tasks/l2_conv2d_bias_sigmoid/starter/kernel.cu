// 3x3 valid convolution + bias + sigmoid. Each thread computes one output pixel for FB
// consecutive output channels: per input channel it loads the 3x3 input patch into
// registers once and reuses it for all FB filters, whose weights (FB * c * 9 floats) and
// biases the block keeps in dynamic shared memory. A block is a row segment of BX pixels.
// grid = (ceil((w - 2) / BX), h - 2, n * ceil(f / FB)); dynamic shared = FB * (c * 9 + 1) floats.
#ifndef BX
#define BX 128
#endif
#ifndef FB
#define FB 8
#endif

extern "C" __global__ void __launch_bounds__(BX)
conv3x3_valid_bias_sigmoid(const float *__restrict__ x, const float *__restrict__ weight,
                           const float *__restrict__ bias, float *__restrict__ y,
                           int n, int c, int f, int h, int w) {
  extern __shared__ float wsh[];  // wsh[q * c * 9 + ch * 9 + e], then FB biases
  const int ho = h - 2, wo = w - 2;
  const int groups = (f + FB - 1) / FB;
  const int b = blockIdx.z / groups, o0 = (blockIdx.z % groups) * FB;
  const int i = blockIdx.y, j = blockIdx.x * BX + threadIdx.x;
  const int per = c * 9;
  for (int e = threadIdx.x; e < FB * per; e += BX) {
    const int o = o0 + e / per;
    wsh[e] = o < f ? weight[(size_t)o * per + e % per] : 0.0f;
  }
  for (int q = threadIdx.x; q < FB; q += BX) wsh[FB * per + q] = o0 + q < f ? bias[o0 + q] : 0.0f;
  __syncthreads();
  if (j >= wo) return;

  float acc[FB];
#pragma unroll
  for (int q = 0; q < FB; ++q) acc[q] = wsh[FB * per + q];
  for (int ch = 0; ch < c; ++ch) {
    const float *xp = x + (((size_t)b * c + ch) * h + i) * w + j;
    float v[9];
#pragma unroll
    for (int u = 0; u < 3; ++u)
#pragma unroll
      for (int t = 0; t < 3; ++t) v[u * 3 + t] = xp[(size_t)u * w + t];
#pragma unroll
    for (int q = 0; q < FB; ++q) {
      const float *wq = wsh + q * per + ch * 9;
#pragma unroll
      for (int e = 0; e < 9; ++e) acc[q] = fmaf(v[e], wq[e], acc[q]);
    }
  }
#pragma unroll
  for (int q = 0; q < FB; ++q) {
    const int o = o0 + q;
    if (o < f) y[(((size_t)b * f + o) * ho + i) * wo + j] = 1.0f / (1.0f + __expf(-acc[q]));
  }
}
