#ifndef BY
#define BY 8
#endif
// Block (32, BY): 32 adjacent columns c (coalesced loads), BY threads splitting the r range;
// partial sums meet in shared memory and are combined by a tree over BY (a power of two).
// grid = (ceil(C / 32), B).
extern "C" __global__ void __launch_bounds__(32 * BY) sum_dim(const float *__restrict__ x, float *__restrict__ y,
                                                              int B, int R, int C) {
  __shared__ float part[BY][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int b = blockIdx.y;
  const int c = blockIdx.x * 32 + tx;
  float s = 0.0f;
  if (c < C) {
    const float *xb = x + (size_t)b * R * C + c;
    for (int r = ty; r < R; r += BY) s += xb[(size_t)r * C];
  }
  part[ty][tx] = s;
  __syncthreads();
  for (int h = BY / 2; h > 0; h >>= 1) {
    if (ty < h) part[ty][tx] += part[ty + h][tx];
    __syncthreads();
  }
  if (ty == 0 && c < C) y[(size_t)b * C + c] = part[0][tx];
}
