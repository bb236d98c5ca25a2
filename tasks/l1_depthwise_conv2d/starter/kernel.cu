#ifndef TX
#define TX 32
#endif
#ifndef TY
#define TY 8
#endif
// A TX x TY block computes a TX x TY output tile of one (n, c) plane: it stages the
// (TY+2) x (TX+2) input tile with its 1-pixel halo (zeros outside the image) in shared
// memory, keeps the channel's 9 weights in registers, and each thread does 9 FMAs.
// grid = (ceil(W / TX), ceil(H / TY), N*C).
extern "C" __global__ void __launch_bounds__(TX * TY) dwconv3x3(const float *__restrict__ x, const float *__restrict__ weight,
                                                                float *__restrict__ y, int N, int C, int H, int W) {
  __shared__ float tile[TY + 2][TX + 2];
  const int plane = blockIdx.z;  // n*C + c
  const int c = plane % C;
  const int w0 = blockIdx.x * TX, h0 = blockIdx.y * TY;
  const float *xp = x + (size_t)plane * H * W;
  for (int i = threadIdx.y; i < TY + 2; i += TY)
    for (int j = threadIdx.x; j < TX + 2; j += TX) {
      const int h = h0 + i - 1, w = w0 + j - 1;
      tile[i][j] = (h >= 0 && h < H && w >= 0 && w < W) ? xp[(size_t)h * W + w] : 0.0f;
    }
  float k[9];
#pragma unroll
  for (int t = 0; t < 9; t++) k[t] = weight[c * 9 + t];
  __syncthreads();
  const int h = h0 + threadIdx.y, w = w0 + threadIdx.x;
  if (h < H && w < W) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 3; i++)
#pragma unroll
      for (int j = 0; j < 3; j++) acc = fmaf(tile[threadIdx.y + i][threadIdx.x + j], k[i * 3 + j], acc);
    y[(size_t)plane * H * W + (size_t)h * W + w] = acc;
  }
}
