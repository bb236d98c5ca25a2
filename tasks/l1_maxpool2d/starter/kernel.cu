#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 4
#endif
// 2-D blocks over the output plane: thread (tx, ty) computes output (p, q) of plane
// blockIdx.z with the window rows and columns clamped to the image (no padding reads).
// grid = (ceil(Wo / BX), ceil(Ho / BY), N*C).
extern "C" __global__ void __launch_bounds__(BX * BY) maxpool2d(const float *__restrict__ x, float *__restrict__ y,
                                                                int N, int C, int H, int W, int Ho, int Wo) {
  const int q = blockIdx.x * BX + threadIdx.x;
  const int p = blockIdx.y * BY + threadIdx.y;
  if (p >= Ho || q >= Wo) return;
  const size_t plane = blockIdx.z;
  const float *xp = x + plane * H * W;
  const int h0 = max(2 * p - 1, 0), h1 = min(2 * p + 1, H - 1);
  const int w0 = max(2 * q - 1, 0), w1 = min(2 * q + 1, W - 1);
  float m = -__int_as_float(0x7f800000);
  for (int h = h0; h <= h1; h++)
    for (int w = w0; w <= w1; w++) m = fmaxf(m, __ldg(xp + (size_t)h * W + w));
  y[(plane * Ho + p) * Wo + q] = m;
}
