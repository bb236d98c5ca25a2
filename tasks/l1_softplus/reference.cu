// One thread per element; evaluated in double (stable form), then rounded to float.
extern "C" __global__ void softplus_ref(const float *x, float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) {
    double v = (double)x[i];
    y[i] = (float)(fmax(v, 0.0) + log1p(exp(-fabs(v))));
  }
}
