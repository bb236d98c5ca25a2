// One block: strided maxima, then a shared-memory tree.
extern "C" __global__ void global_max_ref(const float *x, float *y, long long n) {
  __shared__ float part[1024];
  float m = -__int_as_float(0x7f800000);
  for (long long i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[i]);
  part[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = part[0];
}
