// y = max(x, 0): float4 loads and stores over the first n - n % 4 elements, then the tail
// one at a time (the held-out shape of a problem file has an odd element count).
extern "C" __global__ void relu(const float *x, float *y, long long n) {
  long long stride = (long long)gridDim.x * blockDim.x, tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long n4 = n / 4;
  const float4 *x4 = (const float4 *)x;
  float4 *y4 = (float4 *)y;
  for (long long i = tid; i < n4; i += stride) {
    float4 v = x4[i];
    y4[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
  }
  for (long long i = n4 * 4 + tid; i < n; i += stride) y[i] = fmaxf(x[i], 0.f);
}
