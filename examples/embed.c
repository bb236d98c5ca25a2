/* embed.c — a C program that links libkmrun: compile a kernel, launch it, check it against
 * a reference, time it; then run a Lua script or strategy through the embedded Lua.
 *
 *   cc embed.c $(pkg-config --cflags --libs kmrun) -o embed
 *   ./embed [--arch sm_90] [--run SCRIPT [ARGS...]]
 *
 * Without a GPU it compiles (NVRTC needs none), compares on the host, says why the GPU part
 * is skipped, and still runs the script (strategies send GPU work to worker processes).
 * Exit status: 0 when every step that ran passed, 1 otherwise, or the script's status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kmrun.h>

static const char *SOURCE =
    "extern \"C\" __global__ void relu(const float *x, float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n"
    "}\n"
    "extern \"C\" __global__ void relu_ref(const float *x, float *y, int n) {\n"
    "  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = fmaxf(x[i], 0.f);\n"
    "}\n";

#define CHECK(call)                                                                       \
  do {                                                                                    \
    km_status st_ = (call);                                                               \
    if (st_ != KMRUN_OK) {                                                                \
      fprintf(stderr, "embed: %s: %s (%s)\n", #call, km_errmsg(), km_status_name(st_));   \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

/* The GPU half: load, launch, compare, time. */
static int gpu_part(km_rt *rt, km_prog *prog) {
  km_device_info dev;
  CHECK(km_device(rt, &dev));
  printf("gpu: %s %s\n", dev.name, dev.arch);
  km_mod *mod;
  km_kern *relu, *ref;
  CHECK(km_mod_load(rt, prog, &mod));
  CHECK(km_kern_get(mod, "relu", &relu));
  CHECK(km_kern_get(mod, "relu_ref", &ref));
  int n = 1 << 20;
  int64_t shape[1] = {n};
  km_buf *x, *y, *want;
  CHECK(km_buf_new(rt, KM_F32, shape, 1, &x));
  CHECK(km_buf_new(rt, KM_F32, shape, 1, &y));
  CHECK(km_buf_new(rt, KM_F32, shape, 1, &want));
  CHECK(km_buf_random(x, KM_UNIFORM, -1, 1, 42));
  CHECK(km_buf_poison(y));
  uint64_t px, py, pw, sum_before, sum_after;
  CHECK(km_buf_ptr(x, &px));
  CHECK(km_buf_ptr(y, &py));
  CHECK(km_buf_ptr(want, &pw));
  CHECK(km_buf_checksum(x, &sum_before));
  void *args[] = {&px, &py, &n};
  void *rargs[] = {&px, &pw, &n};
  km_launch_cfg cfg = {{(unsigned)(n + 255) / 256, 1, 1}, {256, 1, 1}, 0};
  km_launch_cfg rcfg = {{1, 1, 1}, {1024, 1, 1}, 0};
  CHECK(km_launch(relu, &cfg, args));
  CHECK(km_launch(ref, &rcfg, rargs));
  km_tolerance tol = {0, 0, 0, 1};
  km_compare_result cmp;
  CHECK(km_allclose(y, want, &tol, &cmp));
  int intact = 0;
  CHECK(km_buf_check_guards(y, &intact));
  CHECK(km_buf_checksum(x, &sum_after));
  printf("launch: ok\ncompare: ok=%d n=%llu mismatches=%llu unwritten=%llu max_abs=%g\n", cmp.ok,
         (unsigned long long)cmp.n, (unsigned long long)cmp.mismatches, (unsigned long long)cmp.unwritten,
         cmp.max_abs);
  printf("guards: %s\ninputs: %s\n", intact ? "intact" : "overwritten",
         sum_before == sum_after ? "unchanged" : "modified");
  km_time_opts topts = {.mode = KM_TIME_COLD, .warmup = 3, .min_samples = 10, .max_samples = 100,
                       .target = 0.01, .max_ms = 1000};
  km_time_result t;
  CHECK(km_time_launch(rt, relu, &cfg, args, &topts, &t));
  printf("time: median %.4f ms (p25 %.4f, p75 %.4f, n %d, cold)\n", t.median, t.p25, t.p75, t.n);
  float host[4];
  km_status st = km_buf_download(y, host, sizeof host); /* a wrong size is refused */
  printf("download of the wrong size: %s\n", km_status_name(st));
  CHECK(km_buf_free(x));
  CHECK(km_buf_free(y));
  CHECK(km_buf_free(want));
  CHECK(km_mod_free(mod));
  st = km_launch(relu, &cfg, args); /* its module is gone */
  printf("launch after the module was freed: %s\n", km_status_name(st));
  return cmp.ok && intact && sum_before == sum_after && st == KMRUN_EHANDLE ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *arch = NULL;
  int run = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--arch") && i + 1 < argc) arch = argv[++i];
    else if (!strcmp(argv[i], "--run") && i + 1 < argc) { run = i + 1; break; }
    else { fprintf(stderr, "usage: embed [--arch sm_NN] [--run SCRIPT [ARGS...]]\n"); return 2; }
  }
  printf("kmrun.h %s, library %s\n", KMRUN_VERSION, km_version());
  int rc = 0;

  /* a NULL or freed handle is an error code, never a crash */
  km_status st = km_buf_free(NULL);
  printf("free(NULL): %s\n", km_status_name(st));
  if (st != KMRUN_EHANDLE) rc = 1;

  /* host compare: the same rule the GPU uses */
  float got[4] = {1, 2, 3, 4.0001f}, want[4] = {1, 2, 3, 4};
  km_tolerance tol = {1e-3, 0, 0, 0};
  km_compare_result cmp;
  CHECK(km_allclose_host(KM_F32, got, want, 4, &tol, &cmp));
  printf("host compare: ok=%d mismatches=%llu\n", cmp.ok, (unsigned long long)cmp.mismatches);

  /* compile: NVRTC and the content-addressed cache; no GPU needed when arch is given */
  km_rt *rt = NULL;
  km_status open_st = km_open(KMRUN_VERSION_NUM, -1, &rt);
  char open_why[512];
  snprintf(open_why, sizeof open_why, "%s", km_errmsg());
  km_compile_opts copts = {"relu.cu", arch ? arch : (open_st == KMRUN_OK ? NULL : "sm_90"), NULL, 0, NULL, 0};
  km_prog *prog = NULL;
  st = km_compile(SOURCE, &copts, &prog);
  if (st != KMRUN_OK) {
    fprintf(stderr, "embed: compile: %s\n%s\n", km_errmsg(), prog ? km_prog_log(prog) : "");
    return 1;
  }
  size_t len = 0;
  km_prog_image(prog, &len);
  printf("compile: ok (%zu bytes, key %.16s..., %s)\n", len, km_prog_key(prog),
         km_prog_cached(prog) ? "cached" : "compiled");
  km_prog *bad = NULL;
  st = km_compile("#include \"/etc/passwd\"\n", &copts, &bad);
  printf("compile of an outside include: %s\n", km_status_name(st));
  if (st != KMRUN_EREFUSED) rc = 1;
  km_prog_free(bad);

  if (open_st == KMRUN_OK) {
    if (gpu_part(rt, prog)) rc = 1;
    CHECK(km_close(rt));
  } else {
    printf("gpu: skipped: %s\n", open_why);
  }
  CHECK(km_prog_free(prog));
  st = km_prog_free(prog);
  printf("double free: %s\n", km_status_name(st));
  if (st != KMRUN_EHANDLE) rc = 1;

  if (run) {
    int status = 0;
    st = km_run_script(argv[run], argc - run - 1, (const char *const *)argv + run + 1, &status);
    if (st != KMRUN_OK) fprintf(stderr, "embed: %s\n", km_errmsg());
    printf("script: exit %d\n", status);
    if (status) rc = status;
  }
  return rc;
}
