/* raw_bench.c — the independent side of bench/core.lua: plain C against the CUDA driver
 * (linked directly with -lcuda, sharing no code with kmrun), loading the same cubin.
 *
 *   raw_bench launch CUBIN N          per-launch cost of N cuLaunchKernel calls (us)
 *   raw_bench time CUBIN N SAMPLES    cold-L2 event timing of axpy over N floats:
 *                                     prints the median (ms) of SAMPLES samples
 *
 * The timer flushes L2 with cuMemsetD32Async over 256 MiB before each sample and takes
 * the median of the event-measured samples: a different flush and a different stopping
 * rule from km.timing's, on purpose. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                   \
  do {                                                                          \
    CUresult r_ = (x);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char *s_ = "?";                                                     \
      cuGetErrorName(r_, &s_);                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, s_);    \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) { perror(path); exit(1); }
  p[n] = 0;
  fclose(f);
  return p;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: raw_bench launch CUBIN N | raw_bench time CUBIN N SAMPLES\n");
    return 2;
  }
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  char *image = slurp(argv[2]);
  CK(cuModuleLoadData(&mod, image));
  long long n = atoll(argv[3]);
  if (!strcmp(argv[1], "launch")) {
    CUfunction f;
    CK(cuModuleGetFunction(&f, mod, "tiny"));
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 1024 * 4));
    int m = 1024;
    void *args[] = {&p, &m};
    for (int i = 0; i < 1000; i++) CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    double t0 = now_us();
    for (long long i = 0; i < n; i++) CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    printf("%.4f\n", (now_us() - t0) / (double)n);
    return 0;
  }
  int samples = atoi(argv[4]);
  CUfunction f;
  CK(cuModuleGetFunction(&f, mod, "axpy"));
  CUdeviceptr x, y, flush;
  size_t fbytes = 256u << 20;
  CK(cuMemAlloc(&x, (size_t)n * 4));
  CK(cuMemAlloc(&y, (size_t)n * 4));
  CK(cuMemAlloc(&flush, fbytes));
  CK(cuMemsetD32(x, 0x3f800000, (size_t)n));
  CK(cuMemsetD32(y, 0, (size_t)n));
  float a = 1.0f;
  void *args[] = {&y, &x, &a, &n};
  CUevent e0, e1;
  CK(cuEventCreate(&e0, 0));
  CK(cuEventCreate(&e1, 0));
  float *ms = malloc(sizeof(float) * (size_t)samples);
  for (int i = 0; i < 5; i++) CK(cuLaunchKernel(f, 132 * 8, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  for (int i = 0; i < samples; i++) {
    CK(cuMemsetD32Async(flush, (unsigned)i, fbytes / 4, NULL));
    CK(cuEventRecord(e0, NULL));
    CK(cuLaunchKernel(f, 132 * 8, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuEventRecord(e1, NULL));
    CK(cuEventSynchronize(e1));
    CK(cuEventElapsedTime(&ms[i], e0, e1));
  }
  qsort(ms, (size_t)samples, sizeof(float), cmpf);
  printf("%.6f\n", samples % 2 ? ms[samples / 2] : 0.5 * (ms[samples / 2 - 1] + ms[samples / 2]));
  return 0;
}
