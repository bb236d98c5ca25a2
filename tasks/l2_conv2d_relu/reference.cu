// Naive reference: one thread per output pixel and output channel.
extern "C" __global__ void conv3x3_relu_ref(const float *x, const float *weight, float *y,
                                            int n, int c, int f, int h, int w) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  int bo = blockIdx.z;  // b * f + o
  if (i >= h || j >= w) return;
  int b = bo / f, o = bo % f;
  float acc = 0.0f;
  for (int ch = 0; ch < c; ++ch)
    for (int u = 0; u < 3; ++u)
      for (int v = 0; v < 3; ++v) {
        int r = i + u - 1, q = j + v - 1;
        if (r >= 0 && r < h && q >= 0 && q < w)
          acc += x[(((size_t)b * c + ch) * h + r) * w + q] * weight[((size_t)o * c + ch) * 9 + u * 3 + v];
      }
  y[((size_t)bo * h + i) * w + j] = acc > 0.0f ? acc : 0.0f;
}
