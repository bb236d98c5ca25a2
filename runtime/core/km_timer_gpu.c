/* km_timer_gpu.c — the timing core's device on CUDA (km_timer_gpu.h). */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "km_timer_gpu.h"
#include "km_driver.h"
#include "km_nvml_lib.h"
#include "km_timer_core.h"

/* ==== the L2 flush scratch (the process's) ==== */

static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr flush_buf;
static size_t flush_bytes_alloc;
static unsigned flush_counter;

static CUresult ensure_flush(size_t bytes) {
  if (flush_buf && flush_bytes_alloc >= bytes) return CUDA_SUCCESS;
  if (flush_buf) km_cu->cuMemFree(flush_buf), flush_buf = 0;
  CUresult r = km_cu->cuMemAlloc(&flush_buf, bytes);
  if (r == CUDA_SUCCESS) flush_bytes_alloc = bytes;
  else flush_buf = 0, flush_bytes_alloc = 0;
  return r;
}

/* ==== the gate's page (the process's): host memory the device reads ====
 * and writes (km_gate's timeouts), as any kernel can that learned its address. Its shadow
 * (km_timer_core.h) is what the host last wrote and saw; every host write and every check is
 * under flush_lock, so runs on several threads keep one shadow. timeouts may rise only while
 * some gate may still be waiting: while a run has gates not known to have run (gate_busy),
 * and, for a run left by an error (gates released but perhaps still queued), until an event
 * recorded behind them is reached (gate_settle). */

static km_gate_page *gate_host;
static CUdeviceptr gate_dev;
static unsigned long long gate_tickets; /* the last ticket handed out (under flush_lock) */
static CUfunction gate_fn;
static km_gate_shadow gate_shadow;
static int gate_busy;      /* runs whose gates may not all have run */
static CUevent gate_settle;
static int gate_settling;  /* gate_settle is recorded behind a left run's gates */

/* The page, the kernel and the settle event, made on first use (under flush_lock). */
static CUresult ensure_gate(void) {
  if (gate_host) return CUDA_SUCCESS;
  CUresult r = km_cuda_util_get("km_gate", &gate_fn);
  void *p = NULL;
  if (r == CUDA_SUCCESS && !gate_settle) r = km_cu->cuEventCreate(&gate_settle, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = km_cu->cuMemHostAlloc(&p, sizeof(km_gate_page), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) return r;
  memset(p, 0, sizeof(km_gate_page));
  if ((r = km_cu->cuMemHostGetDevicePointer(&gate_dev, p, 0)) != CUDA_SUCCESS) {
    km_cu->cuMemFreeHost(p);
    return r;
  }
  gate_host = p;
  memset(&gate_shadow, 0, sizeof gate_shadow);
  return CUDA_SUCCESS;
}

/* Whether a gate may have timed out since the last check (under flush_lock). A settle event
 * reached now still allows it once: its gates counted before it was reached. */
static int gate_may_rise(void) {
  int may = gate_busy > 0;
  if (gate_settling) {
    may = 1;
    if (km_cu->cuEventQuery(gate_settle) != CUDA_ERROR_NOT_READY) gate_settling = 0; /* or the context is gone */
  }
  return may;
}

/* The page against the shadow, put back where it differs (under flush_lock). */
static int gate_check_locked(void) {
  return gate_host ? km_gate_check(gate_host, &gate_shadow, gate_may_rise()) : 0;
}

unsigned long long km_timer_gpu_gate_check(void) {
  pthread_mutex_lock(&flush_lock);
  gate_check_locked();
  unsigned long long n = gate_shadow.tampered;
  pthread_mutex_unlock(&flush_lock);
  return n;
}

CUresult km_timer_gpu_gate_page(CUdeviceptr *addr) {
  pthread_mutex_lock(&flush_lock);
  CUresult r = ensure_gate();
  *addr = r == CUDA_SUCCESS ? gate_dev : 0;
  pthread_mutex_unlock(&flush_lock);
  return r;
}

/* ==== ops ==== */

static double now_ms(void *dev) {
  (void)dev;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void pause_200us(void *dev) {
  (void)dev;
  struct timespec ts = {0, 200000};
  nanosleep(&ts, NULL);
}

static int record(void *dev, int ev) {
  km_timer_gpu *g = dev;
  CUresult r;
  while (g->made <= ev) {
    if ((r = km_cu->cuEventCreate(&g->ev[g->made], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) return r;
    g->made++;
  }
  return km_cu->cuEventRecord(g->ev[ev], g->s);
}

static int query(void *dev, int ev) {
  km_timer_gpu *g = dev;
  CUresult r = km_cu->cuEventQuery(g->ev[ev]);
  return r == CUDA_ERROR_NOT_READY ? KM_TIMER_PENDING : (int)r;
}

static int wait_event(void *dev, int ev) { return km_cu->cuEventSynchronize(((km_timer_gpu *)dev)->ev[ev]); }

static int elapsed(void *dev, int from, int to, float *ms) {
  km_timer_gpu *g = dev;
  return km_cu->cuEventElapsedTime(ms, g->ev[from], g->ev[to]);
}

static int sync_stream(void *dev) { return km_cu->cuStreamSynchronize(((km_timer_gpu *)dev)->s); }

static int flush_prepare(void *dev, long long want, size_t *bytes, const char **what) {
  km_timer_gpu *g = dev;
  int l2 = 0;
  km_cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, km_cuda_device());
  size_t fbytes = want > 0 ? (size_t)want : (size_t)2 * (size_t)(l2 > 0 ? l2 : (1 << 24));
  fbytes = (fbytes + 15) & ~(size_t)15;
  *bytes = fbytes;
  g->flush_n = fbytes / 16;
  CUresult r = km_cuda_util_get("km_flush", &g->flush_fn);
  if (r != CUDA_SUCCESS) {
    *what = "loading kmrun's L2 flush kernel";
    return r;
  }
  pthread_mutex_lock(&flush_lock);
  r = ensure_flush(fbytes);
  pthread_mutex_unlock(&flush_lock);
  return r;
}

static int flush(void *dev) {
  km_timer_gpu *g = dev;
  pthread_mutex_lock(&flush_lock);
  unsigned v = ++flush_counter;
  void *args[] = {&flush_buf, &g->flush_n, &v};
  CUresult r = km_cuda_util_launch(g->flush_fn, g->flush_n, g->s, args);
  pthread_mutex_unlock(&flush_lock);
  return r;
}

/* Work sent to the legacy default stream during the capture fails it (global mode), so
 * nothing escapes it unseen. */
static int capture_begin(void *dev, const char **what) {
  km_timer_gpu *g = dev;
  CUresult r = km_cu->cuStreamCreate(&g->cap, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    g->cap = NULL;
    *what = "creating a capture stream";
    return r;
  }
  if ((r = km_cu->cuStreamBeginCapture(g->cap, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS) {
    km_cu->cuStreamDestroy(g->cap);
    g->cap = NULL;
    *what = "begin capture";
    return r;
  }
  g->saved = km_cuda_set_stream(g->cap);
  return CUDA_SUCCESS;
}

static int capture_end(void *dev, int keep, const char **what) {
  km_timer_gpu *g = dev;
  if (!g->cap) return CUDA_ERROR_INVALID_VALUE;
  km_cuda_set_stream(g->saved);
  CUgraph graph = NULL;
  CUresult r = km_cu->cuStreamEndCapture(g->cap, &graph);
  km_cu->cuStreamDestroy(g->cap);
  g->cap = NULL;
  if (r != CUDA_SUCCESS || !keep) {
    if (graph) km_cu->cuGraphDestroy(graph);
    return r;
  }
  g->graph = graph;
  if ((r = km_cu->cuGraphInstantiateWithFlags(&g->exec, graph, 0)) != CUDA_SUCCESS) {
    g->exec = NULL;
    *what = "instantiating a graph";
  }
  return r;
}

static int replay(void *dev) {
  km_timer_gpu *g = dev;
  return km_cu->cuGraphLaunch(g->exec, g->s);
}

/* ==== the clock probes of runs: enqueued, copied back, read once reached ====
 * The process's pinned host words and device words, PROBE_PAIRS pairs of slots (a run's start
 * and end probe), each pair held by one timer at a time (under flush_lock). A probe writes its
 * two words in device memory, an async copy brings them into the pinned pair and an event
 * marks it; the core reads a slot before any candidate call behind it can run (the start
 * probe before the first sample's gate opens, the end probe after the last sample), so no
 * call sees the copy land. */
#define PROBE_PAIRS 64
static unsigned long long *probe_host; /* 4 words a pair: slot k at 2k */
static CUdeviceptr probe_dev;
static unsigned long long probe_taken; /* bit i: pair i held */

static CUresult probe_claim(km_timer_gpu *g) {
  if (g->probe_pair) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&flush_lock);
  if (!probe_host) {
    void *h = NULL;
    r = km_cu->cuMemHostAlloc(&h, PROBE_PAIRS * 32, CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_SUCCESS && (r = km_cu->cuMemAlloc(&probe_dev, PROBE_PAIRS * 32)) != CUDA_SUCCESS)
      km_cu->cuMemFreeHost(h), h = NULL;
    probe_host = h;
  }
  int pair = -1;
  for (int i = 0; r == CUDA_SUCCESS && i < PROBE_PAIRS && pair < 0; i++)
    if (!(probe_taken >> i & 1)) pair = i;
  if (pair >= 0) probe_taken |= 1ull << pair, g->probe_pair = pair + 1;
  else if (r == CUDA_SUCCESS) r = CUDA_ERROR_OUT_OF_MEMORY; /* every pair held */
  pthread_mutex_unlock(&flush_lock);
  for (int k = 0; r == CUDA_SUCCESS && k < 2; k++)
    if (!g->probe_ev[k]) r = km_cu->cuEventCreate(&g->probe_ev[k], CU_EVENT_DISABLE_TIMING);
  return r;
}

static int probe(void *dev, int slot) {
  km_timer_gpu *g = dev;
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_clock_probe", &fn);
  if (r == CUDA_SUCCESS) r = probe_claim(g);
  if (r != CUDA_SUCCESS) return r;
  int w = 4 * (g->probe_pair - 1) + 2 * slot;
  CUdeviceptr out = probe_dev + 8 * (size_t)w;
  long long cycles = KM_CLOCK_PROBE_CYCLES;
  void *args[] = {&cycles, &out};
  r = km_cu->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, g->s, args, NULL);
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyDtoHAsync(probe_host + w, out, 16, g->s);
  if (r == CUDA_SUCCESS) r = km_cu->cuEventRecord(g->probe_ev[slot], g->s);
  if (r == CUDA_SUCCESS) g->probe_pending |= 1 << slot;
  return r;
}

static double probe_read(void *dev, int slot) {
  km_timer_gpu *g = dev;
  if (!(g->probe_pending >> slot & 1)) return NAN;
  g->probe_pending &= ~(1 << slot);
  if (km_cu->cuEventSynchronize(g->probe_ev[slot]) != CUDA_SUCCESS) return NAN;
  unsigned long long *v = probe_host + 4 * (g->probe_pair - 1) + 2 * slot;
  double mhz = v[1] ? (double)v[0] / (double)v[1] * 1000.0 : NAN;
  v[0] = v[1] = 0;
  return mhz;
}

/* The pair back to the process, once no copy into it can still land. */
static void probe_leave(km_timer_gpu *g) {
  for (int k = 0; k < 2; k++)
    if (g->probe_pending >> k & 1) km_cu->cuEventSynchronize(g->probe_ev[k]); /* failing: the context is gone */
  g->probe_pending = 0;
  for (int k = 0; k < 2; k++)
    if (g->probe_ev[k]) km_cu->cuEventDestroy(g->probe_ev[k]), g->probe_ev[k] = NULL;
  if (!g->probe_pair) return;
  pthread_mutex_lock(&flush_lock);
  probe_taken &= ~(1ull << (g->probe_pair - 1));
  pthread_mutex_unlock(&flush_lock);
  g->probe_pair = 0;
}

static int read_clock(void *dev, double *mhz) {
  km_timer_gpu *g = dev;
  unsigned v = 0;
  const char *why;
  if (!g->nvml || km_nvml_sm_clock(g->nvml, &v, &why) != 0) return -1;
  *mhz = v;
  return 0;
}

/* NVML's handle of the device this process's context is on, looked up once by UUID. */
static km_nvml_dev nvml_device(const char **why) {
  static int done;
  static km_nvml_dev dev;
  static const char *err;
  if (!done) {
    done = 1;
    CUuuid u;
    memset(&u, 0, sizeof u);
    if (km_cu->cuDeviceGetUuid(&u, km_cuda_device()) != CUDA_SUCCESS) err = "cuDeviceGetUuid failed";
    else {
      const unsigned char *b = (const unsigned char *)u.bytes;
      char s[64];
      snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
      if (km_nvml_device(s, 0, &dev, &err) != 0) dev = NULL;
    }
  }
  *why = err;
  return dev;
}

static int energy_begin(void *dev, const char **why) {
  km_timer_gpu *g = dev;
  const char *nvml_why = NULL;
  g->nvml = nvml_device(&nvml_why);
  if (!g->nvml) {
    *why = nvml_why ? nvml_why : "NVML unavailable";
    return -1;
  }
  km_energy_begin(&g->ew, g->nvml);
  if (g->ew.status) *why = g->ew.why;
  return g->ew.status;
}

static void energy_poll(void *dev, double calls) { km_energy_poll(&((km_timer_gpu *)dev)->ew, calls); }
static int energy_enough(void *dev) { return km_energy_enough(&((km_timer_gpu *)dev)->ew); }
static int energy_end(void *dev, double *j, double *span_ms, double *calls, const char **why) {
  return km_energy_end(&((km_timer_gpu *)dev)->ew, j, span_ms, calls, why);
}

/* A gate for the next sample: a one-thread kernel on the timed stream waiting for its ticket. */
static int gate(void *dev, double timeout_ms) {
  km_timer_gpu *g = dev;
  pthread_mutex_lock(&flush_lock);
  CUresult r = ensure_gate();
  unsigned long long ticket = ++gate_tickets, timeout = (unsigned long long)(timeout_ms * 1e6);
  if (r == CUDA_SUCCESS && !g->gate_base_set) g->gate_base = gate_shadow.timeouts, g->gate_base_set = 1;
  if (r == CUDA_SUCCESS && !g->gate_busy) g->gate_busy = 1, gate_busy++;
  pthread_mutex_unlock(&flush_lock);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr counter = gate_dev + offsetof(km_gate_page, timeouts);
  void *args[] = {&gate_dev, &ticket, &timeout, &counter};
  r = km_cu->cuLaunchKernel(gate_fn, 1, 1, 1, 1, 1, 1, 0, g->s, args, NULL);
  if (r == CUDA_SUCCESS) g->gate_ticket = ticket;
  return r;
}

/* Opens every gate this run enqueued (and any older: tickets only grow). */
static void release(void *dev) {
  km_timer_gpu *g = dev;
  if (!gate_host || !g->gate_ticket) return;
  pthread_mutex_lock(&flush_lock);
  km_gate_release(gate_host, &gate_shadow, g->gate_ticket);
  pthread_mutex_unlock(&flush_lock);
}

static int gate_timeouts(void *dev) {
  km_timer_gpu *g = dev;
  if (!gate_host || !g->gate_base_set) return 0;
  return (int)(__atomic_load_n(&gate_host->timeouts, __ATOMIC_ACQUIRE) - g->gate_base);
}

/* settled: the run has waited for all its samples, so all its gates have run. */
static int gate_check(void *dev, int settled) {
  km_timer_gpu *g = dev;
  pthread_mutex_lock(&flush_lock);
  int what = gate_check_locked();
  if (settled && g->gate_busy) g->gate_busy = 0, gate_busy--;
  pthread_mutex_unlock(&flush_lock);
  return what;
}

/* A run left before its gates were known to have run: they are released, and may still count
 * a timeout until the stream passes them, so the settle event is recorded behind them. */
static void gate_leave(km_timer_gpu *g) {
  if (!g->gate_busy) return;
  pthread_mutex_lock(&flush_lock);
  g->gate_busy = 0;
  gate_busy--;
  km_cu->cuEventRecord(gate_settle, g->s); /* failing: the next check allows a rise once */
  gate_settling = 1;
  pthread_mutex_unlock(&flush_lock);
}

static const km_timer_ops OPS_FULL = {now_ms, pause_200us, record, query, wait_event, elapsed, sync_stream,
                                      flush_prepare, flush, capture_begin, capture_end, replay,
                                      probe, probe_read, read_clock, energy_begin, energy_poll, energy_enough, energy_end,
                                      gate, release, gate_timeouts, gate_check};
static const km_timer_ops OPS_PLAIN = {now_ms, pause_200us, record, query, wait_event, elapsed, sync_stream,
                                       flush_prepare, flush, capture_begin, capture_end, replay,
                                       NULL, NULL, NULL, NULL, NULL, NULL, NULL, gate, release, gate_timeouts, gate_check};

const km_timer_ops *km_timer_gpu_ops(int clocks_and_energy) { return clocks_and_energy ? &OPS_FULL : &OPS_PLAIN; }

void km_timer_gpu_init(km_timer_gpu *g) {
  memset(g, 0, sizeof *g);
  g->s = km_cuda_stream();
}

void km_timer_gpu_release(km_timer_gpu *g) {
  release(g); /* a run left by an error: no gate of its may hold the stream */
  if (g->cap) { /* a capture left open (a run that did not come back) */
    CUgraph graph = NULL;
    km_cuda_set_stream(g->saved);
    if (km_cu->cuStreamEndCapture(g->cap, &graph) == CUDA_SUCCESS && graph) km_cu->cuGraphDestroy(graph);
    km_cu->cuStreamDestroy(g->cap);
    g->cap = NULL;
  }
  gate_leave(g);
  probe_leave(g);
  for (int i = 0; i < g->made; i++) km_cu->cuEventDestroy(g->ev[i]);
  g->made = 0;
  if (g->exec) km_cu->cuGraphExecDestroy(g->exec);
  if (g->graph) km_cu->cuGraphDestroy(g->graph);
  g->exec = NULL;
  g->graph = NULL;
}

/* ==== clocks and ceilings ==== */

/* The probe's two words: device memory of the process's, allocated once (a cuMemFree after
 * each probe waited for the whole device, twice a timing). */
static CUdeviceptr probe_out;

double km_timer_gpu_sm_clock_cycles(long long cycles) {
  CUfunction fn;
  if (km_cuda_util_get("km_clock_probe", &fn) != CUDA_SUCCESS) return NAN;
  pthread_mutex_lock(&flush_lock);
  CUresult r = probe_out ? CUDA_SUCCESS : km_cu->cuMemAlloc(&probe_out, 16);
  CUdeviceptr out = probe_out;
  pthread_mutex_unlock(&flush_lock);
  if (r != CUDA_SUCCESS) return NAN;
  void *args[] = {&cycles, &out};
  unsigned long long v[2] = {0, 0};
  r = km_cu->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, km_cuda_stream(), args, NULL);
  if (r == CUDA_SUCCESS) r = km_cu->cuStreamSynchronize(km_cuda_stream());
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyDtoH(v, out, 16);
  if (r != CUDA_SUCCESS || v[1] == 0) return NAN;
  return (double)v[0] / (double)v[1] * 1000.0;
}

double km_timer_gpu_sm_clock(void) { return km_timer_gpu_sm_clock_cycles(KM_CLOCK_PROBE_CYCLES); }

/* Best (minimum) event time of `reps` launches of fn over `n` items, in ms. */
static CUresult best_ms(CUfunction fn, uint64_t n, void **args, int reps, unsigned grid, double *out) {
  CUevent a, b;
  CUresult r = km_cu->cuEventCreate(&a, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) return r;
  if ((r = km_cu->cuEventCreate(&b, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) { km_cu->cuEventDestroy(a); return r; }
  CUstream s = km_cuda_stream();
  double best = INFINITY;
  for (int i = 0; i < reps && r == CUDA_SUCCESS; i++) {
    float ms = 0;
    r = km_cu->cuEventRecord(a, s);
    if (r == CUDA_SUCCESS) r = grid ? km_cu->cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, s, args, NULL)
                                    : km_cuda_util_launch(fn, n, s, args);
    if (r == CUDA_SUCCESS) r = km_cu->cuEventRecord(b, s);
    if (r == CUDA_SUCCESS) r = km_cu->cuEventSynchronize(b);
    if (r == CUDA_SUCCESS) r = km_cu->cuEventElapsedTime(&ms, a, b);
    if (r == CUDA_SUCCESS && i > 0 && ms < best) best = ms; /* the first run warms up */
  }
  km_cu->cuEventDestroy(a);
  km_cu->cuEventDestroy(b);
  *out = best;
  return r;
}

CUresult km_timer_gpu_peaks(double *bandwidth_gbs, double *fp32_tflops, const char **what) {
  CUfunction copy_fn, fma_fn;
  CUresult r = km_cuda_util_get("km_copy", &copy_fn);
  if (r == CUDA_SUCCESS) r = km_cuda_util_get("km_fma", &fma_fn);
  if (r != CUDA_SUCCESS) { *what = "peaks: loading kmrun's kernels"; return r; }
  size_t bytes = (size_t)512 << 20;
  CUdeviceptr src, dst;
  *what = "peaks: allocating";
  if ((r = km_cu->cuMemAlloc(&src, bytes)) != CUDA_SUCCESS) return r;
  if ((r = km_cu->cuMemAlloc(&dst, bytes)) != CUDA_SUCCESS) { km_cu->cuMemFree(src); return r; }
  km_cu->cuMemsetD32(src, 0x3f800000, bytes / 4);
  uint64_t n = bytes / 16;
  void *cargs[] = {&dst, &src, &n};
  double copy_ms = 0, fma_ms = 0;
  r = best_ms(copy_fn, n, cargs, 6, 0, &copy_ms);
  int sms = 0;
  km_cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, km_cuda_device());
  int iters = 4096;
  float a = 0.999f, bb = 0.001f;
  void *fargs[] = {&dst, &iters, &a, &bb};
  unsigned grid = (unsigned)sms * 8;
  if (r == CUDA_SUCCESS) r = best_ms(fma_fn, 0, fargs, 6, grid, &fma_ms);
  km_cu->cuMemFree(src);
  km_cu->cuMemFree(dst);
  *what = "peaks";
  if (r != CUDA_SUCCESS) return r;
  *bandwidth_gbs = 2.0 * (double)bytes / (copy_ms * 1e-3) / 1e9;
  *fp32_tflops = (double)grid * 256 * iters * 16 / (fma_ms * 1e-3) / 1e12;
  return CUDA_SUCCESS;
}
