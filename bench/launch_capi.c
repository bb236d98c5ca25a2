/* launch_capi.c — launch overhead through libkmrun's C API (bench/launch_overhead.sh).
 *
 *   launch_capi N CUBIN_OUT    prints microseconds per km_launch of the 4x256 `tiny` kernel
 *                              over N launches, and writes the cubin for raw_bench
 *
 * Same kernel and loop as bench/core.lua's section 2 and bench/raw_bench.c. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <kmrun.h>

static const char *SRC =
    "extern \"C\" __global__ void tiny(float *p, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) p[i] += 1.0f;\n"
    "}\n";

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#define CK(x)                                                                   \
  do {                                                                          \
    if ((x) != KMRUN_OK) {                                                      \
      fprintf(stderr, "launch_capi: %s: %s\n", #x, km_errmsg());                \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(int argc, char **argv) {
  /* exit status: 0, 1 on a failure, 2 on usage errors, 3 where there is no GPU */
  if (argc != 3) { fprintf(stderr, "usage: launch_capi N CUBIN_OUT\n"); return 2; }
  long long n = atoll(argv[1]);
  km_rt *rt;
  km_status st = km_open(KMRUN_VERSION_NUM, -1, &rt);
  if (st == KMRUN_ENODEV) { fprintf(stderr, "launch_capi: no GPU: %s\n", km_errmsg()); return 3; }
  CK(st);
  km_device_info dev;
  CK(km_device(rt, &dev));
  km_compile_opts o = {"tiny.cu", dev.arch, NULL, 0, NULL, 0};
  km_prog *prog;
  CK(km_compile(SRC, &o, &prog));
  size_t len;
  const void *image = km_prog_image(prog, &len);
  FILE *f = fopen(argv[2], "wb");
  if (!f || fwrite(image, 1, len, f) != len || fclose(f)) { perror(argv[2]); return 1; }
  km_mod *mod;
  km_kern *k;
  CK(km_mod_load(rt, prog, &mod));
  CK(km_kern_get(mod, "tiny", &k));
  int64_t shape[1] = {1024};
  km_buf *b;
  CK(km_buf_new(rt, KM_F32, shape, 1, &b));
  CK(km_buf_fill(b, 0));
  uint64_t p;
  CK(km_buf_ptr(b, &p));
  int m = 1024;
  void *args[] = {&p, &m};
  km_launch_cfg cfg = {{4, 1, 1}, {256, 1, 1}, 0};
  for (int i = 0; i < 1000; i++) CK(km_launch(k, &cfg, args));
  CK(km_synchronize(rt));
  double t0 = now_us();
  for (long long i = 0; i < n; i++) CK(km_launch(k, &cfg, args));
  CK(km_synchronize(rt));
  printf("%.4f\n", (now_us() - t0) / (double)n);
  km_buf_free(b);
  km_mod_free(mod);
  km_prog_free(prog);
  km_close(rt);
  return 0;
}
