// Naive reference: one thread per output pixel and output channel.
extern "C" __global__ void conv3x3_valid_bias_sigmoid_ref(const float *x, const float *weight, const float *bias,
                                                          float *y, int n, int c, int f, int h, int w) {
  int ho = h - 2, wo = w - 2;
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  int bo = blockIdx.z;  // b * f + o
  if (i >= ho || j >= wo) return;
  int b = bo / f, o = bo % f;
  float acc = bias[o];
  for (int ch = 0; ch < c; ++ch)
    for (int u = 0; u < 3; ++u)
      for (int v = 0; v < 3; ++v)
        acc += x[(((size_t)b * c + ch) * h + i + u) * w + j + v] * weight[((size_t)o * c + ch) * 9 + u * 3 + v];
  y[((size_t)bo * ho + i) * wo + j] = 1.0f / (1.0f + expf(-acc));
}
