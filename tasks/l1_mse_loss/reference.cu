// One block of 256 threads per row r: thread t adds the squared differences at columns t,
// t+256, ... in double; thread 0 adds the 256 sums one by one and divides by cols.
extern "C" __global__ void mse_rows_ref(const float *pred, const float *target, float *loss, int rows, int cols) {
  __shared__ double sh[256];
  int r = blockIdx.x, t = threadIdx.x;
  if (r >= rows) return;
  const float *p = pred + (size_t)r * cols, *q = target + (size_t)r * cols;
  double s = 0.0;
  for (int c = t; c < cols; c += 256) {
    double d = (double)p[c] - (double)q[c];
    s += d * d;
  }
  sh[t] = s;
  __syncthreads();
  if (t == 0) {
    double total = 0.0;
    for (int i = 0; i < 256; i++) total += sh[i];
    loss[r] = (float)(total / (double)cols);
  }
}
