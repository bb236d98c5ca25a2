// One thread per element; evaluated in double, then rounded to float.
extern "C" __global__ void sigmoid_ref(const float *x, float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
}
