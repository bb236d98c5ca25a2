extern "C" __global__ void pad_relu_ref(const float *x, float *y, long long n, long long pad) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
  else if (i < n + pad) y[i] = 0.f;
}
