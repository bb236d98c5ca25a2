/* km_nvml_lib.h — NVML (libnvidia-ml.so.1) as the other C modules see it: energy, memory and
 * clocks of a GPU, where the library is there.
 *
 * NVML is never linked: km_nvml_lib.c opens it with dlopen on first use (KM_NVML_LIB names
 * another file, for tests), calls nvmlInit_v2 once and keeps it loaded for the process.
 * Without it every call fails with a reason; nothing else in kmrun needs it.
 * Devices are named by NVML index or, better, by UUID ("GPU-xxxxxxxx-..."), which is the
 * same for CUDA and NVML whatever CUDA_VISIBLE_DEVICES and device ordering say.
 * Pure C: no lua_State; the binding, `require "km.nvml"`, is runtime/bind/km_nvml.c. */
#ifndef KM_NVML_LIB_H
#define KM_NVML_LIB_H
#include <stdint.h>

typedef struct km_nvml_dev_s *km_nvml_dev; /* NVML's nvmlDevice_t, opaque */

/* Loads and initialises NVML once. NULL when usable, else why not (a static string). */
const char *km_nvml_load(void);

/* Starts km_nvml_load on a thread of its own and returns at once (nvmlInit takes a while: a
 * GPU worker starts it as it starts); a later km_nvml_load waits for it to end. 0, or -1
 * where no thread could be started (km_nvml_load then loads on first use, as without it). */
int km_nvml_load_ahead(void);

/* A device by UUID (when uuid is not NULL) or by NVML index. 0, or a negative status with
 * *why set to NVML's message. */
int km_nvml_device(const char *uuid, unsigned index, km_nvml_dev *out, const char **why);

/* Energy used by the device since the driver loaded, in millijoules (Volta and newer). */
int km_nvml_energy_mj(km_nvml_dev d, uint64_t *mj, const char **why);
/* Device memory in bytes. */
int km_nvml_memory(km_nvml_dev d, uint64_t *used, uint64_t *total, const char **why);
/* The current SM clock in MHz. */
int km_nvml_sm_clock(km_nvml_dev d, unsigned *mhz, const char **why);
/* The clock state: SM and memory clocks in MHz and the reasons the clocks are held below
 * their maximum (NVML's clocks event / throttle reasons bit mask). KM_ENOTFOUND with the
 * clocks set and *reasons 0 where the library has no reasons entry point. */
int km_nvml_clocks(km_nvml_dev d, unsigned *sm_mhz, unsigned *mem_mhz, unsigned long long *reasons, const char **why);

/* ---- energy per call over a window of work ----
 * The energy counter moves in steps (every ~100 ms on the H200; seen on the GPU host), so
 * the difference of two reads taken at arbitrary times is off by up to a step at each end.
 * A window therefore measures between counter *edges*: the caller polls while the work runs
 * (km_energy_poll, with the calls completed so far), and the energy per call is the energy
 * between the first and the last edge seen divided by the calls completed between them.
 * Fewer than two edges, or edges less than KM_ENERGY_MIN_MS apart, give no number
 * (km_energy_end says why). It is the whole device's energy: idle moments and any other work
 * on the GPU between the edges are included. */
#define KM_ENERGY_MIN_MS 100.0

typedef struct {
  km_nvml_dev dev;
  int status;          /* 0, or why the window could not start: */
  const char *why;
  uint64_t last_mj;    /* the counter at the latest poll */
  int edges;           /* changes of the counter seen */
  uint64_t first_mj, edge_mj;     /* the counter at the first and the latest edge */
  double first_ms, edge_ms;       /* CLOCK_MONOTONIC ms when they were seen */
  double first_calls, edge_calls; /* calls completed then */
} km_energy_window;

/* Reads the counter at the start of the work (w->status, w->why say why not). */
void km_energy_begin(km_energy_window *w, km_nvml_dev d);
/* Reads it again; `calls` = calls completed so far. Returns 1 when it moved (an edge). */
int km_energy_poll(km_energy_window *w, double calls);
/* Whether the edges so far span enough for km_energy_end to answer. */
int km_energy_enough(const km_energy_window *w);
/* 0 with joules per call, the span between the edges (ms) and the calls in it; or a negative
 * status with *why (NVML missing, fewer than two edges, a span too short). */
int km_energy_end(const km_energy_window *w, double *j_per_call, double *span_ms, double *calls, const char **why);

#endif
