// One thread per element; evaluated in double, then rounded to float.
extern "C" __global__ void gelu_ref(const float *x, float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) {
    double v = (double)x[i];
    y[i] = (float)(0.5 * v * (1.0 + erf(v * 0.70710678118654752440)));
  }
}
