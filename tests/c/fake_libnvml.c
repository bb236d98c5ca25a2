/* fake_libnvml.c — a stand-in for libnvidia-ml.so.1 that km.nvml's loader can be pointed
 * at (KM_NVML_LIB), to test the loader and the energy arithmetic without a GPU.
 *
 * One device, UUID GPU-00000000-0000-0000-0000-000000000001, index 0.
 * Its energy counter grows at FAKE_NVML_WATTS (default 300) watts of wall time since the
 * library was first asked, refreshed every FAKE_NVML_STEP_MS (default 20) ms, as the real
 * counter moves in steps. FAKE_NVML_MODE chooses the behaviour:
 *   ok        everything answers (default)
 *   noinit    nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED
 *   noenergy  the energy counter is not supported (pre-Volta)
 *   frozen    the energy counter never moves
 * and FAKE_NVML_INIT_MS, how long nvmlInit_v2 takes (default 0). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum { SUCCESS = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, DRIVER_NOT_LOADED = 9 };
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef void *nvmlDevice_t;
static int the_device;
static const char *UUID = "GPU-00000000-0000-0000-0000-000000000001";

static const char *mode(void) {
  const char *m = getenv("FAKE_NVML_MODE");
  return m ? m : "ok";
}
static double env_num(const char *name, double def) {
  const char *v = getenv(name);
  return v ? atof(v) : def;
}
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

nvmlReturn_t nvmlInit_v2(void) {
  double ms = env_num("FAKE_NVML_INIT_MS", 0);
  if (ms > 0) {
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000 * (time_t)(ms / 1000)) * 1e6)};
    nanosleep(&ts, NULL);
  }
  return strcmp(mode(), "noinit") ? SUCCESS : DRIVER_NOT_LOADED;
}
nvmlReturn_t nvmlShutdown(void) { return SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
  case SUCCESS: return "Success";
  case NOT_SUPPORTED: return "Not Supported";
  case NOT_FOUND: return "Not Found";
  case DRIVER_NOT_LOADED: return "Driver Not Loaded";
  default: return "Unknown Error";
  }
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return SUCCESS; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
  if (i != 0) return INVALID_ARGUMENT;
  *d = &the_device;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
  if (strcmp(uuid, UUID)) return NOT_FOUND;
  *d = &the_device;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
  static double t0;
  if (d != &the_device) return INVALID_ARGUMENT;
  if (!strcmp(mode(), "noenergy")) return NOT_SUPPORTED;
  double t = now_ms(), step = env_num("FAKE_NVML_STEP_MS", 20);
  if (t0 == 0) t0 = t;
  double ms = strcmp(mode(), "frozen") ? t - t0 : 0;
  if (step > 0) ms = (double)(long long)(ms / step) * step;
  *mj = 1000000ull + (unsigned long long)(ms * env_num("FAKE_NVML_WATTS", 300)); /* W x ms = mJ */
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  if (d != &the_device) return INVALID_ARGUMENT;
  m->total = 80ull << 30;
  m->used = 3ull << 30;
  m->free = m->total - m->used;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
  if (d != &the_device) return INVALID_ARGUMENT;
  *mhz = type == 1 ? 1755 : 2619;
  return SUCCESS;
}
/* clocks event reasons: FAKE_NVML_REASONS (a number; default 0x4, the software power cap) */
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
  if (d != &the_device) return INVALID_ARGUMENT;
  *r = (unsigned long long)env_num("FAKE_NVML_REASONS", 4);
  return SUCCESS;
}
