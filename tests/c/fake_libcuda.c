/* fake_libcuda.c — a stand-in for libcuda.so.1 that km.cuda's loader can be pointed at
 * (KM_LIBCUDA), to test the loader's failure paths on machines without a GPU.
 *
 * FAKE_CUDA_MODE chooses the behaviour:
 *   nodevice    cuInit succeeds, cuDeviceGetCount reports 0
 *   noinit      cuInit returns CUDA_ERROR_NO_DEVICE
 *   missing:SYM cuGetProcAddress does not know SYM
 *   ok          everything up to a context answers, and the device's facts (name,
 *               attributes, memory, UUID: made-up values); nothing can run
 * FAKE_CUDA_LOG, if set, gets one line per cuGetProcAddress request: "symbol version". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { OK = 0, NO_DEVICE = 100, NOT_FOUND = 500, NOT_SUPPORTED = 801 };

static const char *mode(void) {
  const char *m = getenv("FAKE_CUDA_MODE");
  return m ? m : "ok";
}

static CUresult f_init(unsigned flags) { (void)flags; return strcmp(mode(), "noinit") ? OK : NO_DEVICE; }
static CUresult f_count(int *n) { *n = strcmp(mode(), "nodevice") ? 1 : 0; return OK; }
static CUresult f_version(int *v) { *v = 13000; return OK; }
static CUresult f_name(CUresult r, const char **s) {
  *s = r == NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : r == OK ? "CUDA_SUCCESS" : "CUDA_ERROR_UNKNOWN";
  return OK;
}
static CUresult f_string(CUresult r, const char **s) {
  *s = r == NO_DEVICE ? "no CUDA-capable device is detected" : "fake";
  return OK;
}
static CUresult f_device_get(int *d, int i) { *d = i; return OK; }
static CUresult f_retain(void **ctx, int dev) { (void)dev; static int c; *ctx = &c; return OK; }
static CUresult f_set_current(void *ctx) { (void)ctx; return OK; }
static CUresult f_get_current(void **ctx) { static int c; *ctx = &c; return OK; }
static CUresult f_other(void) { return NOT_SUPPORTED; }

/* Device facts, distinct per attribute so a field read from the wrong one shows. */
static CUresult f_dev_name(char *name, int len, int dev) { snprintf(name, (size_t)len, "Fake GPU %d", dev); return OK; }
static CUresult f_attribute(int *v, int attrib, int dev) {
  (void)dev;
  *v = attrib == 75 ? 9 : attrib == 76 ? 0 : 1001 * attrib; /* compute capability 9.0 */
  return OK;
}
static CUresult f_total_mem(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return OK; }
static CUresult f_uuid(unsigned char bytes[16], int dev) {
  for (int i = 0; i < 16; i++) bytes[i] = (unsigned char)(0xa0 + 13 * i + dev);
  return OK;
}

/* The entry point km.cuda resolves first, by name. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
  (void)flags;
  const char *log = getenv("FAKE_CUDA_LOG");
  if (log) {
    FILE *f = fopen(log, "a");
    if (f) { fprintf(f, "%s %d\n", symbol, version); fclose(f); }
  }
  const char *m = mode();
  if (!strncmp(m, "missing:", 8) && !strcmp(m + 8, symbol)) {
    *pfn = NULL;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return NOT_FOUND;
  }
  static const struct { const char *name; void *fn; } table[] = {
      {"cuInit", (void *)f_init}, {"cuDeviceGetCount", (void *)f_count},
      {"cuDriverGetVersion", (void *)f_version}, {"cuGetErrorName", (void *)f_name},
      {"cuGetErrorString", (void *)f_string}, {"cuDeviceGet", (void *)f_device_get},
      {"cuDevicePrimaryCtxRetain", (void *)f_retain}, {"cuCtxSetCurrent", (void *)f_set_current},
      {"cuCtxGetCurrent", (void *)f_get_current}, {"cuDeviceGetName", (void *)f_dev_name},
      {"cuDeviceGetAttribute", (void *)f_attribute}, {"cuDeviceTotalMem", (void *)f_total_mem},
      {"cuDeviceGetUuid", (void *)f_uuid},
  };
  *pfn = (void *)f_other;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (!strcmp(table[i].name, symbol)) *pfn = table[i].fn;
  if (status) *status = 0;
  return OK;
}
