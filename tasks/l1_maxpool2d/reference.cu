// One thread per output element, a plain loop over the window.
extern "C" __global__ void maxpool2d_ref(const float *x, float *y, int N, int C, int H, int W, int Ho, int Wo) {
  long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long total = (long long)N * C * Ho * Wo;
  if (idx >= total) return;
  int q = (int)(idx % Wo);
  int p = (int)((idx / Wo) % Ho);
  long long plane = idx / ((long long)Wo * Ho);
  const float *xp = x + (size_t)plane * H * W;
  float m = xp[(size_t)(2 * p) * W + 2 * q];  // the window's center is always inside
  for (int i = -1; i <= 1; i++)
    for (int j = -1; j <= 1; j++) {
      int h = 2 * p + i, w = 2 * q + j;
      if (h >= 0 && h < H && w >= 0 && w < W) m = fmaxf(m, xp[(size_t)h * W + w]);
    }
  y[idx] = m;
}
