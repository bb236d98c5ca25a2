// One thread per output element; the 9 taps accumulated in double.
extern "C" __global__ void dwconv3x3_ref(const float *x, const float *weight, float *y, int N, int C, int H, int W) {
  long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long total = (long long)N * C * H * W;
  if (idx >= total) return;
  int w = (int)(idx % W);
  int h = (int)((idx / W) % H);
  long long plane = idx / ((long long)W * H);  // n*C + c
  int c = (int)(plane % C);
  const float *xp = x + (size_t)plane * H * W;
  double s = 0.0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      int hh = h + i - 1, ww = w + j - 1;
      if (hh >= 0 && hh < H && ww >= 0 && ww < W)
        s += (double)xp[(size_t)hh * W + ww] * (double)weight[c * 9 + i * 3 + j];
    }
  y[idx] = (float)s;
}
