/* km_driver.c — the CUDA driver in plain C (km_driver.h): loading libcuda.so.1, the one
 * process-wide context, the wording of a failed call, the stream launches go to, and
 * kmrun's own utility kernels. No lua_State: the bindings (km_cuda.c, km_buffer.c, ...), the
 * plain-C device work (km_devops.c, km_kernel.c, km_devinfo.c) and the C API sit on top.
 *
 * Ownership: the function table, the context and the utility module live until the
 * process exits (a CUDA context cannot survive fork: workers are exec'd). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "km_driver.h"

/* ==== loading ==== */

static km_cuda_api api;
const km_cuda_api *km_cu = NULL;
static int load_state = 0; /* 0 not tried, 1 ok, -1 failed */
static char load_why[512];
static int chosen_device = -1;
static CUdevice cu_device;
static CUcontext cu_ctx;
static CUstream current_stream = NULL; /* where launches go unless told otherwise */

const char *km_cuda_errname(CUresult r) {
  const char *s = NULL;
  if (km_cu && km_cu->cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUDA_ERROR_UNKNOWN";
}

const char *km_cuda_errstr(CUresult r) {
  const char *s = NULL;
  if (km_cu && km_cu->cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
  return "unknown CUDA error";
}

char *km_cuda_msg(CUresult r, const char *what, char *msg, size_t n) {
  snprintf(msg, n, "%s: %s: %s", km_cuda_errname(r), what, km_cuda_errstr(r));
  return msg;
}

static int env_device(void) {
  const char *e = getenv("KM_DEVICE");
  return e && *e ? atoi(e) : 0;
}

/* Names whose cuda.h prototype is the CUDA 2.0 one while CUDA 13's is another (above). */
static int old_prototype(const char *name) {
  return !strcmp(name, "cuCtxSynchronize") || !strcmp(name, "cuCtxGetDevice");
}

static void load_driver(void) {
  const char *lib = getenv("KM_LIBCUDA");
  if (!lib || !*lib) lib = "libcuda.so.1";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_why, sizeof load_why, "no CUDA driver: cannot load %s (%s)", lib, dlerror());
    return;
  }
  __typeof__(&cuGetProcAddress) gpa = (__typeof__(&cuGetProcAddress))dlsym(h, "cuGetProcAddress_v2");
  if (!gpa) {
    snprintf(load_why, sizeof load_why,
             "CUDA driver too old: %s has no cuGetProcAddress_v2 (CUDA 12 or newer needed)", lib);
    return;
  }
  /* Resolve each name as cuda.h spells it before its _vN macro; the driver returns the
   * version matching CUDA_VERSION, which is the prototype km_cuda_api holds — except where
   * CUDA 13 gave the name a new signature and cuda.h kept the old one under it (the new one
   * is spelled _v2): asked at 13000, "cuCtxSynchronize" is cuCtxSynchronize_v2(CUcontext)
   * and "cuCtxGetDevice" cuCtxGetDevice_v2(CUdevice *, CUcontext), and a call with the old
   * prototype hands the driver whatever the argument register held as the context. Those
   * are asked at the version of the prototype cuda.h declares (old_prototype). */
#define KM_CUDA_RESOLVE(name)                                                             \
  {                                                                                       \
    CUdriverProcAddressQueryResult st;                                                    \
    void *fp = NULL;                                                                      \
    CUresult r = gpa(#name, &fp, old_prototype(#name) ? 2000 : CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st); \
    if (r != CUDA_SUCCESS || !fp || st != CU_GET_PROC_ADDRESS_SUCCESS) {                  \
      snprintf(load_why, sizeof load_why,                                                 \
               "CUDA driver lacks %s for CUDA %d.%d (driver too old? status %d)", #name,  \
               CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10, (int)st);                   \
      return;                                                                             \
    }                                                                                     \
    memcpy(&api.name, &fp, sizeof fp);                                                    \
  }
  KM_CUDA_FUNCS(KM_CUDA_RESOLVE)
#undef KM_CUDA_RESOLVE
  km_cu = &api; /* error names work from here on */
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    snprintf(load_why, sizeof load_why, "cuInit failed: %s: %s", km_cuda_errname(r), km_cuda_errstr(r));
    km_cu = NULL;
    return;
  }
  int count = 0;
  r = api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    snprintf(load_why, sizeof load_why, "no CUDA device (%s)",
             r != CUDA_SUCCESS ? km_cuda_errname(r) : "count is 0");
    km_cu = NULL;
    return;
  }
  int dev = chosen_device >= 0 ? chosen_device : env_device();
  if (dev < 0 || dev >= count) {
    snprintf(load_why, sizeof load_why, "device %d requested but %d device(s) visible", dev, count);
    km_cu = NULL;
    return;
  }
  if ((r = api.cuDeviceGet(&cu_device, dev)) != CUDA_SUCCESS ||
      (r = api.cuDevicePrimaryCtxRetain(&cu_ctx, cu_device)) != CUDA_SUCCESS ||
      (r = api.cuCtxSetCurrent(cu_ctx)) != CUDA_SUCCESS) {
    snprintf(load_why, sizeof load_why, "cannot create a context on device %d: %s: %s", dev,
             km_cuda_errname(r), km_cuda_errstr(r));
    km_cu = NULL;
    return;
  }
  chosen_device = dev;
  load_state = 1;
}

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

const km_cuda_api *km_cuda_get(const char **why) {
  pthread_mutex_lock(&load_lock);
  if (load_state == 0) {
    load_state = -1;
    load_driver();
  }
  pthread_mutex_unlock(&load_lock);
  if (load_state == 1) {
    /* The context is per thread: make it current for callers on other threads. */
    CUcontext cur = NULL;
    if (api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != cu_ctx) api.cuCtxSetCurrent(cu_ctx);
    return &api;
  }
  if (why) *why = load_why;
  return NULL;
}

/* The compute capability of the context this process already holds; 0 when it holds none.
 * Never loads the driver or creates a context: km.nvrtc asks this for its default arch,
 * and the driver process (which compiles too) must never open CUDA. */
int km_cuda_current_arch(int *major, int *minor) {
  if (load_state != 1 || !km_cuda_get(NULL)) return 0;
  api.cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu_device);
  api.cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu_device);
  return 1;
}


CUstream km_cuda_stream(void) { return current_stream; }
CUstream km_cuda_set_stream(CUstream s) {
  CUstream old = current_stream;
  current_stream = s;
  return old;
}

const km_cuda_api *km_cuda_use(int dev, const char **why) {
  static char msg[160];
  if (dev >= 0 && load_state == 1 && dev != chosen_device) {
    snprintf(msg, sizeof msg, "device %d requested but device %d is already in use in this process", dev,
             chosen_device);
    *why = msg;
    return NULL;
  }
  if (dev >= 0) {
    if (load_state == -1) load_state = 0; /* let a new choice retry */
    chosen_device = dev;
  }
  return km_cuda_get(why);
}

/* ==== kmrun's own kernels (runtime/kernels/km_util.cu, embedded) ==== */

extern const char km_util_fatbin[];
static CUmodule util_module;

CUresult km_cuda_util_get(const char *name, CUfunction *fn) {
  if (!km_cuda_get(NULL)) return CUDA_ERROR_NOT_INITIALIZED;
  if (!util_module) {
    CUresult r = api.cuModuleLoadData(&util_module, km_util_fatbin);
    if (r != CUDA_SUCCESS) {
      util_module = NULL;
      return r;
    }
  }
  return api.cuModuleGetFunction(fn, util_module, name);
}


/* Blocks of 256 threads of fn one SM holds at once (its registers decide: km_compare's 48 a
 * thread leave room for 5, km_random_check's 34 for 6), asked of the driver once a function
 * and kept; 8 (a full SM at 32 registers) where it cannot say. */
static int util_blocks_per_sm(CUfunction fn) {
  static struct { CUfunction fn; int blocks; } seen[32];
  static unsigned next;
  for (unsigned i = 0; i < sizeof seen / sizeof *seen; i++)
    if (seen[i].fn == fn) return seen[i].blocks;
  int b = 0;
  if (api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, 256, 0) != CUDA_SUCCESS || b < 1 || b > 8) b = 8;
  unsigned k = next++ % (sizeof seen / sizeof *seen);
  seen[k].fn = fn, seen[k].blocks = b;
  return b;
}

/* Launches a utility kernel over n items with a grid sized for the device: at most one wave,
 * as many blocks as the SMs hold at once. The kernels stride over their items, so a grid of
 * more blocks than fit runs in two waves, the second a fraction of the SMs' width (at 8
 * blocks an SM, km_random_check, which fits 6, takes 1.7x km_random's time on the same
 * buffers: bench/RESULTS.md, "one-wave"). */
CUresult km_cuda_util_launch(CUfunction fn, uint64_t n, CUstream s, void **args) {
  static int sms = 0;
  if (!sms && api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu_device) != CUDA_SUCCESS) sms = 0;
  uint64_t blocks = (n + 255) / 256;
  uint64_t cap = (uint64_t)(sms > 0 ? sms : 1) * (uint64_t)util_blocks_per_sm(fn);
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return api.cuLaunchKernel(fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, s, args, NULL);
}

CUdevice km_cuda_device(void) { return cu_device; }

int km_cuda_loaded(void) { return load_state == 1; }
int km_cuda_device_index(void) { return chosen_device; }
int km_cuda_util_loaded(void) { return util_module != NULL; }
