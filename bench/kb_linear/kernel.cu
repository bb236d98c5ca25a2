// y = x W^T + b for bench/kb_linear/problem.py: a warp per output element, its lanes over K
// (rows of x and W read coalesced), a shuffle sum.
extern "C" __global__ void linear(const float *x, const float *W, const float *b, float *y, int B, int K, int N) {
  long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (warp >= (long long)B * N) return;
  int r = (int)(warp / N), j = (int)(warp % N);
  float acc = 0.f;
  for (int q = lane; q < K; q += 32) acc = fmaf(x[(size_t)r * K + q], W[(size_t)j * K + q], acc);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) y[(size_t)r * N + j] = acc + b[j];
}
