/* km_nvml_lib.c — NVML loaded at run time (see km_nvml_lib.h); plain C, no lua_State. The
 * binding, `require "km.nvml"`, is runtime/bind/km_nvml.c.
 *
 * The prototypes are NVML's (nvml.h is not in every toolkit, so they are written out here);
 * the versioned names are the ones nvml.h maps the plain names to. KM_NVML_LIB names another
 * library file (tests/c/fake_libnvml.c). The library stays loaded for the process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "km.h"
#include "km_nvml_lib.h"

typedef int nvmlReturn_t; /* NVML_SUCCESS = 0 */
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };

static struct {
  nvmlReturn_t (*init)(void);
  const char *(*error_string)(nvmlReturn_t);
  nvmlReturn_t (*by_index)(unsigned, km_nvml_dev *);
  nvmlReturn_t (*by_uuid)(const char *, km_nvml_dev *);
  nvmlReturn_t (*energy)(km_nvml_dev, unsigned long long *);   /* optional */
  nvmlReturn_t (*memory)(km_nvml_dev, nvmlMemory_t *);         /* optional */
  nvmlReturn_t (*clock)(km_nvml_dev, int, unsigned *);         /* optional */
  nvmlReturn_t (*reasons)(km_nvml_dev, unsigned long long *);  /* optional: event (throttle) reasons */
} nv;

static const char *load_why = "NVML not loaded";
static char load_buf[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  const char *lib = getenv("KM_NVML_LIB");
  if (!lib || !*lib) lib = "libnvidia-ml.so.1";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(load_buf, sizeof load_buf, "no NVML: cannot load %s (%s)", lib, e ? e : "?");
    load_why = load_buf;
    return;
  }
  static const struct { const char *name; void **slot; int required; } syms[] = {
    {"nvmlInit_v2", (void **)&nv.init, 1},
    {"nvmlErrorString", (void **)&nv.error_string, 1},
    {"nvmlDeviceGetHandleByIndex_v2", (void **)&nv.by_index, 1},
    {"nvmlDeviceGetHandleByUUID", (void **)&nv.by_uuid, 1},
    {"nvmlDeviceGetTotalEnergyConsumption", (void **)&nv.energy, 0},
    {"nvmlDeviceGetMemoryInfo", (void **)&nv.memory, 0},
    {"nvmlDeviceGetClockInfo", (void **)&nv.clock, 0},
    {"nvmlDeviceGetCurrentClocksThrottleReasons", (void **)&nv.reasons, 0},
    {"nvmlDeviceGetCurrentClocksEventReasons", (void **)&nv.reasons, 0}, /* the newer name, where there */
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(h, syms[i].name);
    if (f || !*syms[i].slot) *syms[i].slot = f; /* a later name found wins; one not found keeps an earlier */
    if (!*syms[i].slot && syms[i].required) {
      snprintf(load_buf, sizeof load_buf, "no NVML: %s lacks %s", lib, syms[i].name);
      load_why = load_buf;
      memset(&nv, 0, sizeof nv);
      dlclose(h);
      return;
    }
  }
  nvmlReturn_t r = nv.init();
  if (r != 0) {
    snprintf(load_buf, sizeof load_buf, "no NVML: nvmlInit failed: %s (%d)", nv.error_string(r), r);
    load_why = load_buf;
    memset(&nv, 0, sizeof nv);
    return; /* the library stays mapped: NVML may have started threads */
  }
  load_why = NULL;
}

const char *km_nvml_load(void) {
  pthread_once(&once, load);
  return load_why;
}

static void *load_thread(void *arg) {
  (void)arg;
  km_nvml_load();
  return NULL;
}

int km_nvml_load_ahead(void) {
  pthread_t th;
  if (pthread_create(&th, NULL, load_thread, NULL)) return -1;
  pthread_detach(th);
  return 0;
}

static int nv_fail(nvmlReturn_t r, const char **why) {
  if (why) *why = nv.error_string(r);
  return KM_EIO;
}

int km_nvml_device(const char *uuid, unsigned index, km_nvml_dev *out, const char **why) {
  const char *w = km_nvml_load();
  if (w) { if (why) *why = w; return KM_ENOTFOUND; }
  nvmlReturn_t r = uuid ? nv.by_uuid(uuid, out) : nv.by_index(index, out);
  return r ? nv_fail(r, why) : 0;
}

#define NEED(fn, name)                                                   \
  do {                                                                   \
    const char *w_ = km_nvml_load();                                     \
    if (!w_ && !nv.fn) w_ = "no NVML: the library lacks " name;          \
    if (w_) { if (why) *why = w_; return KM_ENOTFOUND; }                  \
  } while (0)

int km_nvml_energy_mj(km_nvml_dev d, uint64_t *mj, const char **why) {
  NEED(energy, "nvmlDeviceGetTotalEnergyConsumption");
  unsigned long long v = 0;
  nvmlReturn_t r = nv.energy(d, &v);
  if (r) return nv_fail(r, why);
  *mj = v;
  return 0;
}

int km_nvml_memory(km_nvml_dev d, uint64_t *used, uint64_t *total, const char **why) {
  NEED(memory, "nvmlDeviceGetMemoryInfo");
  nvmlMemory_t m = {0, 0, 0};
  nvmlReturn_t r = nv.memory(d, &m);
  if (r) return nv_fail(r, why);
  *used = m.used, *total = m.total;
  return 0;
}

int km_nvml_sm_clock(km_nvml_dev d, unsigned *mhz, const char **why) {
  NEED(clock, "nvmlDeviceGetClockInfo");
  nvmlReturn_t r = nv.clock(d, NVML_CLOCK_SM, mhz);
  return r ? nv_fail(r, why) : 0;
}

int km_nvml_clocks(km_nvml_dev d, unsigned *sm_mhz, unsigned *mem_mhz, unsigned long long *reasons, const char **why) {
  NEED(clock, "nvmlDeviceGetClockInfo");
  nvmlReturn_t r = nv.clock(d, NVML_CLOCK_SM, sm_mhz);
  if (!r) r = nv.clock(d, NVML_CLOCK_MEM, mem_mhz);
  if (r) return nv_fail(r, why);
  *reasons = 0;
  if (!nv.reasons) return KM_ENOTFOUND; /* clocks given; the reasons are not */
  r = nv.reasons(d, reasons);
  return r ? nv_fail(r, why) : 0;
}

/* ---- energy windows ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void km_energy_begin(km_energy_window *w, km_nvml_dev d) {
  memset(w, 0, sizeof *w);
  w->dev = d;
  w->status = km_nvml_energy_mj(d, &w->last_mj, &w->why);
}

int km_energy_poll(km_energy_window *w, double calls) {
  uint64_t mj = 0;
  if (w->status || km_nvml_energy_mj(w->dev, &mj, NULL) != 0 || mj == w->last_mj) return 0;
  w->last_mj = mj;
  double t = now_ms();
  if (w->edges++ == 0) w->first_mj = mj, w->first_ms = t, w->first_calls = calls;
  w->edge_mj = mj, w->edge_ms = t, w->edge_calls = calls;
  return 1;
}

int km_energy_enough(const km_energy_window *w) {
  return !w->status && w->edges >= 2 && w->edge_ms - w->first_ms >= KM_ENERGY_MIN_MS && w->edge_calls > w->first_calls;
}

int km_energy_end(const km_energy_window *w, double *j_per_call, double *span_ms, double *calls, const char **why) {
  static char buf[200];
  *span_ms = w->edge_ms - w->first_ms;
  *calls = w->edge_calls - w->first_calls;
  if (w->status) { *why = w->why; return w->status; }
  if (w->edges < 2) {
    snprintf(buf, sizeof buf, "the energy counter moved %d time%s during the work: too short to measure "
             "(it moves in steps; at least %.0f ms between two of them is needed)", w->edges, w->edges == 1 ? "" : "s", KM_ENERGY_MIN_MS);
    *why = buf;
    return KM_ERANGE;
  }
  if (*span_ms < KM_ENERGY_MIN_MS) {
    snprintf(buf, sizeof buf, "the energy counter's steps seen during the work span %.1f ms, under %.0f ms: too coarse to measure",
             *span_ms, KM_ENERGY_MIN_MS);
    *why = buf;
    return KM_ERANGE;
  }
  if (*calls <= 0) { *why = "no call completed between the energy counter's steps"; return KM_EINVAL; }
  *j_per_call = (double)(w->edge_mj - w->first_mj) / 1e3 / *calls;
  return 0;
}
