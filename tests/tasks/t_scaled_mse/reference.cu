// Pass 1: each of P threads sums a strided slice of the squared differences in double.
extern "C" __global__ void smse_partial_ref(const float *pred, const float *target, const float *scale,
                                            double *partial, long long n, int P) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= P) return;
  double a = (double)scale[0], s = 0.0;
  for (long long i = t; i < n; i += P) {
    double d = a * (double)pred[i] - (double)target[i];
    s += d * d;
  }
  partial[t] = s;
}
// Pass 2: one block of 256 threads adds the partials; thread 0 divides by n.
extern "C" __global__ void smse_final_ref(const double *partial, int P, float *loss, long long n) {
  __shared__ double sh[256];
  int t = threadIdx.x;
  double s = 0.0;
  for (int i = t; i < P; i += 256) s += partial[i];
  sh[t] = s;
  __syncthreads();
  if (t == 0) {
    double total = 0.0;
    for (int i = 0; i < 256; i++) total += sh[i];
    loss[0] = (float)(total / (double)n);
  }
}
