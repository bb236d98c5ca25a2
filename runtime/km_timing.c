/* km_timing.c — `require "km.timing"`: time GPU work with CUDA events.
 *
 *   timing.time(fn_or_graph, { mode = "cold"|"warm"|"graph", warmup = 3, warmup_ms = 5,
 *                              min_samples = 20, max_samples = 300, target = 0.002,
 *                              min_ms = 0, max_ms = 2000, rep = 1, flush_bytes = 2*L2,
 *                              samples = false, energy = false, before = fn(phase),
 *                              after = fn(phase) })
 *     -> { median, mean, min, max, p25, p75, n, n_extra, stop, rel_noise, mode, rep, total_ms,
 *          protocol, samples?, sm_clock_mhz, sm_clock_start_mhz, sm_clock_min_mhz,
 *          sm_clock_max_mhz, clock_moved, energy_j?, energy_window_ms?, energy_calls?,
 *          energy_includes_flush?, energy_unavailable?, flush_bytes? }
 *        (times in ms per call of fn)
 *        | nil, msg, code when fn (or CUDA) reports a failure; an error fn raises is
 *          raised again after the CUDA events are released
 *   timing.protocol_key(opts) -> the string naming the protocol those options give (a cache
 *                        key: equal keys, comparable timings); timing.protocol(opts) -> its table
 *   timing.floor()     -> the empty-kernel launch floor (warm mode), measured once
 *   timing.sm_clock()  -> SM clock in MHz while a kernel runs (clock64 vs %globaltimer)
 *
 * fn enqueues work on km.cuda's current stream and returns nothing (or nil, msg, code on
 * failure). Cold mode writes a scratch buffer twice the L2 size before every sample so no
 * sample finds its data in cache; warm mode runs back to back; graph mode captures fn once
 * into a CUDA graph and times its replays (for tiny kernels, where launch cost dominates).
 *
 * Stopping (km_sampling_core.h, docs/timing.md): after each sample, sampling stops at the first
 * n >= min_samples whose median has a relative standard error <= target once the samples sum
 * to min_ms; or at max_samples; or after max_ms of wall time (at >= 3 samples). `stop` says
 * which. Samples are queued ahead of the one being read, as many as the measured time per
 * sample needs to keep the GPU busy and never more than the rule may still need; those queued
 * past the stop (n_extra) run but are not counted. `protocol` records all of this (with
 * KM_TIMING_PROTOCOL_VERSION): results with different keys are not comparable.
 *
 * Hooks: before(phase) runs before each warm-up call and before each sample (ahead of its L2
 * flush), after(phase) after each warm-up call and after each sample's end event; phase is
 * "warmup" or "sample". Both run outside the timed window (a sample of rep > 1 calls gets one
 * pair), when the sample is enqueued; work they enqueue goes to the stream in order. A hook
 * returning nil, msg [, code] stops timing with that failure. In graph mode they run around
 * each replay, never during the capture.
 *
 * Clocks: the SM clock is probed (km_clock_probe) just before the first sample and after
 * the last (sm_clock_start_mhz, sm_clock_mhz); where NVML is there its SM clock is also read
 * once every 16 samples while samples run. sm_clock_min/max_mhz span all of these;
 * clock_moved is true when max exceeds min by more than CLOCK_MOVED (2%): the samples were
 * not all taken at one clock, so compare such a time with care.
 *
 * Energy (NVML, km_nvml.h): NVML's energy counter moves in steps (~100 ms apart on the
 * H200), so while samples run the host polls it (instead of blocking on the next sample's
 * end event) and notes, at each step, how many timed calls had completed. energy_j = the
 * energy between the first and the last step seen / the calls completed between them
 * (energy_calls, over energy_window_ms). It is the whole device's energy: the host gaps
 * between samples are in it, and in cold mode so are the L2 flushes (energy_includes_flush).
 * Fewer than two steps, or steps under KM_ENERGY_MIN_MS (100 ms) apart, give
 * energy_unavailable (a reason) instead of a number; with `energy = true` a noise stop is held
 * back (within max_samples and max_ms) until there are enough. Without NVML,
 * energy_unavailable says why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_sampling_core.h"
#include "km_stats_core.h"
#include "km_cuda.h"
#include "km_nvml.h"

#define SLOTS 64          /* samples in flight at most: SLOTS - 1 */
#define SLACK_MS 0.2      /* host wake-up latency the queue covers */
#define ENERGY_SLACK_MS 5 /* with an energy window: one NVML energy read costs ~3 ms */
#define CLOCK_MOVED 0.02
#define KM_TIMING_EVENTS_MT "km.TimingEvents"

static CUdeviceptr flush_buf;
static size_t flush_bytes_alloc;
static unsigned flush_counter;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static CUresult ensure_flush(lua_State *L, size_t bytes) {
  if (flush_buf && flush_bytes_alloc >= bytes) return CUDA_SUCCESS;
  if (flush_buf) km_cu->cuMemFree(flush_buf), flush_buf = 0;
  CUresult r = km_cu->cuMemAlloc(&flush_buf, bytes);
  if (r == CUDA_SUCCESS) flush_bytes_alloc = bytes;
  else flush_buf = 0;
  (void)L;
  return r;
}

static CUresult flush_l2(lua_State *L, CUstream s, size_t bytes) {
  CUfunction fn = km_cuda_util(L, "km_flush");
  uint64_t n = bytes / 16;
  unsigned v = ++flush_counter;
  void *args[] = {&flush_buf, &n, &v};
  return km_cuda_util_launch(fn, n, s, args);
}

/* Calls the timed thing once. Returns 0, or 3 with nil, msg, code pushed. */
static int call_once(lua_State *L, int fidx, int is_graph) {
  lua_pushvalue(L, fidx);
  if (is_graph) {
    lua_getfield(L, -1, "launch");
    lua_insert(L, -2);
    lua_call(L, 1, 3);
  } else {
    lua_call(L, 0, 3);
  }
  /* fn returning nil, msg (a failure) vs nothing / true */
  if (lua_isnil(L, -3) && !lua_isnil(L, -2)) return 3;
  lua_pop(L, 3);
  return 0;
}

/* Calls the before/after hook at `hidx` (if any) with `phase`. Returns 0, or 3 with
 * nil, msg, code pushed when the hook returned nil and a message (timing stops there). */
static int call_hook(lua_State *L, int hidx, const char *phase) {
  if (lua_isnil(L, hidx)) return 0;
  lua_pushvalue(L, hidx);
  lua_pushstring(L, phase);
  lua_call(L, 1, 3);
  if (lua_isnil(L, -3) && !lua_isnil(L, -2)) return 3;
  lua_pop(L, 3);
  return 0;
}

static double sm_clock(lua_State *L) {
  CUfunction fn = km_cuda_util(L, "km_clock_probe");
  CUdeviceptr out;
  if (km_cu->cuMemAlloc(&out, 16) != CUDA_SUCCESS) return NAN;
  long long cycles = 400000; /* ~0.2 ms at 2 GHz: %globaltimer ticks are coarse */
  void *args[] = {&cycles, &out};
  unsigned long long v[2] = {0, 0};
  CUresult r = km_cu->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, km_cuda_stream(), args, NULL);
  if (r == CUDA_SUCCESS) r = km_cu->cuStreamSynchronize(km_cuda_stream());
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyDtoH(v, out, 16);
  km_cu->cuMemFree(out);
  if (r != CUDA_SUCCESS || v[1] == 0) return NAN;
  return (double)v[0] / (double)v[1] * 1000.0;
}

static int l_sm_clock(lua_State *L) {
  km_cuda_check(L);
  lua_pushnumber(L, sm_clock(L));
  return 1;
}

/* The events live in a to-be-closed userdata: an error raised inside fn (the launch code's
 * own, a budget stop) releases them while it unwinds, and the error goes on unchanged.
 * Sample i uses slot i % SLOTS; at most SLOTS - 1 samples are in flight, so a slot is reused
 * only after its sample has been read, and sample i - 1's end event is still there when
 * sample i is read. Events are created as the queue first grows into their slots. */
typedef struct {
  CUevent ev[2 * SLOTS]; /* (start, end) pairs */
  int made;
} evset;
#define EV(e, i, end) ((e)->ev[2 * ((i) % SLOTS) + (end)])

static void evset_free(evset *e) {
  for (int i = 0; i < e->made; i++) km_cu->cuEventDestroy(e->ev[i]);
  e->made = 0;
}

static int evset_gc(lua_State *L) {
  evset_free(luaL_checkudata(L, 1, KM_TIMING_EVENTS_MT));
  return 0;
}

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

typedef struct { double lo, hi; } clock_span;

static void clock_note(clock_span *c, double mhz) {
  if (!(mhz > 0)) return; /* NaN: the probe failed */
  if (!(c->lo <= mhz)) c->lo = mhz;
  if (!(c->hi >= mhz)) c->hi = mhz;
}

/* What enqueueing a batch of samples needs. */

/* What enqueueing a sample needs. */
typedef struct {
  lua_State *L;
  const km_cuda_api *cu;
  evset *ev;
  CUstream s;
  int cold, is_graph, per_sample_launches, before, after;
  size_t fbytes;
} sampler;

/* Enqueues sample i: before hook, L2 flush, start event, the calls, end event, after hook.
 * Returns 0; 3 with nil, msg, code pushed (fn or a hook failed); -1 with *r. */
static int enqueue(sampler *sp, int i, CUresult *r) {
  lua_State *L = sp->L;
  while (sp->ev->made < 2 * SLOTS && sp->ev->made < 2 * (i + 1)) {
    if ((*r = sp->cu->cuEventCreate(&sp->ev->ev[sp->ev->made], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) return -1;
    sp->ev->made++;
  }
  if (call_hook(L, sp->before, "sample")) return 3;
  if (sp->cold && (*r = flush_l2(L, sp->s, sp->fbytes)) != CUDA_SUCCESS) return -1;
  if ((*r = sp->cu->cuEventRecord(EV(sp->ev, i, 0), sp->s)) != CUDA_SUCCESS) return -1;
  for (int k = 0; k < sp->per_sample_launches; k++)
    if (call_once(L, 1, sp->is_graph)) return 3;
  if ((*r = sp->cu->cuEventRecord(EV(sp->ev, i, 1), sp->s)) != CUDA_SUCCESS) return -1;
  if (call_hook(L, sp->after, "sample")) return 3;
  return 0;
}

/* Samples completed: all before i (waited for in order), then those from i on whose end
 * events have completed (in stream order), up to `queued`. */
static int done_through(const km_cuda_api *cu, evset *ev, int i, int queued) {
  while (i < queued && cu->cuEventQuery(EV(ev, i, 1)) == CUDA_SUCCESS) i++;
  return i;
}

/* Waits for sample i to finish. With an energy window, polls NVML's counter every 200 us
 * meanwhile instead of blocking, telling it at each poll how many calls had completed. The
 * wait is on the host only: the GPU's timeline is the same as with a blocking wait. */
static CUresult wait_sample(const km_cuda_api *cu, evset *ev, int i, int queued, km_energy_window *w, int per_sample) {
  if (!w) return cu->cuEventSynchronize(EV(ev, i, 1));
  for (;;) {
    CUresult r = cu->cuEventQuery(EV(ev, i, 1));
    if (r == CUDA_SUCCESS) break;
    if (r != CUDA_ERROR_NOT_READY) return r;
    km_energy_poll(w, (double)done_through(cu, ev, i, queued) * per_sample);
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  km_energy_poll(w, (double)done_through(cu, ev, i + 1, queued) * per_sample);
  return CUDA_SUCCESS;
}

/* ==== the protocol: the options that decide how a time is taken ==== */

/* Reads them from the options table at idx (absent: the defaults); raises on misuse. */
static void read_protocol(lua_State *L, int idx, km_timing_protocol *p) {
  if (!lua_isnoneornil(L, idx)) luaL_checktype(L, idx, LUA_TTABLE);
  const char *mode = km_optfield_str(L, idx, "mode", "cold");
  static const char *const MODES[] = {"cold", "warm", "graph"};
  p->mode = NULL;
  for (int i = 0; i < 3; i++)
    if (!strcmp(mode, MODES[i])) p->mode = MODES[i]; /* a static string: the option's may go */
  if (!p->mode) luaL_error(L, "timing: unknown mode '%s' (cold, warm, graph)", mode);
  p->warmup = (int)km_optfield_int(L, idx, "warmup", 3);
  p->warmup_ms = km_optfield_num(L, idx, "warmup_ms", 5);
  p->rep = (int)km_optfield_int(L, idx, "rep", 1);
  p->flush_bytes = (long long)km_optfield_int(L, idx, "flush_bytes", 0);
  p->energy = km_optfield_bool(L, idx, "energy", 0);
  km_stop_rule_default(&p->stop);
  p->stop.min_samples = (int)km_optfield_int(L, idx, "min_samples", p->stop.min_samples);
  p->stop.max_samples = (int)km_optfield_int(L, idx, "max_samples", p->stop.max_samples);
  p->stop.max_noise = km_optfield_num(L, idx, "target", p->stop.max_noise);
  p->stop.min_ms = km_optfield_num(L, idx, "min_ms", p->stop.min_ms);
  p->stop.max_ms = km_optfield_num(L, idx, "max_ms", p->stop.max_ms);
  if (km_stop_rule_valid(&p->stop) || p->rep < 1 || p->warmup < 0 || p->flush_bytes < 0)
    luaL_error(L, "timing: need 1 <= min_samples <= max_samples, target >= 0, min_ms >= 0, max_ms > 0, "
                  "rep >= 1, warmup >= 0, flush_bytes >= 0");
}

static void push_key(lua_State *L, const km_timing_protocol *p) {
  char key[512];
  km_timing_protocol_key(p, key, sizeof key);
  lua_pushstring(L, key);
}

/* [.., protocol]: every field of p, its version and key */
static void push_protocol(lua_State *L, const km_timing_protocol *p) {
  lua_createtable(L, 0, 13);
  lua_pushinteger(L, KM_TIMING_PROTOCOL_VERSION); lua_setfield(L, -2, "version");
  push_key(L, p); lua_setfield(L, -2, "key");
  lua_pushstring(L, p->mode); lua_setfield(L, -2, "mode");
  lua_pushinteger(L, p->rep); lua_setfield(L, -2, "rep");
  lua_pushinteger(L, p->warmup); lua_setfield(L, -2, "warmup");
  lua_pushnumber(L, p->warmup_ms); lua_setfield(L, -2, "warmup_ms");
  lua_pushinteger(L, p->stop.min_samples); lua_setfield(L, -2, "min_samples");
  lua_pushinteger(L, p->stop.max_samples); lua_setfield(L, -2, "max_samples");
  lua_pushnumber(L, p->stop.max_noise); lua_setfield(L, -2, "target");
  lua_pushnumber(L, p->stop.min_ms); lua_setfield(L, -2, "min_ms");
  lua_pushnumber(L, p->stop.max_ms); lua_setfield(L, -2, "max_ms");
  if (!strcmp(p->mode, "cold")) { lua_pushinteger(L, p->flush_bytes); lua_setfield(L, -2, "flush_bytes"); }
  lua_pushboolean(L, p->energy); lua_setfield(L, -2, "energy");
}

/* timing.protocol_key(opts) -> the key of the protocol these options give (no GPU needed) */
static int l_protocol_key(lua_State *L) {
  km_timing_protocol p;
  read_protocol(L, 1, &p);
  push_key(L, &p);
  return 1;
}

/* timing.protocol(opts) -> the protocol table a result would carry */
static int l_protocol(lua_State *L) {
  km_timing_protocol p;
  read_protocol(L, 1, &p);
  push_protocol(L, &p);
  return 1;
}

/* ==== timing.time ==== */

/* The sample arrays live in a userdata so an error inside fn leaks nothing. */
static int l_time(lua_State *L) {
  km_timing_protocol proto;
  read_protocol(L, 2, &proto); /* misuse is an error with or without a GPU */
  const km_cuda_api *cu = km_cuda_check(L);
  int is_graph = luaL_testudata(L, 1, "km.Graph") != NULL;
  if (!is_graph) luaL_checktype(L, 1, LUA_TFUNCTION);
  int cold = !strcmp(proto.mode, "cold"), graph_mode = !strcmp(proto.mode, "graph");
  int warmup = proto.warmup, rep = proto.rep;
  double warmup_ms = proto.warmup_ms;
  int max_n = proto.stop.max_samples;
  int keep = km_optfield_bool(L, 2, "samples", 0);
  int want_energy = proto.energy;
  int l2 = 0;
  cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, km_cuda_device());
  size_t fbytes = proto.flush_bytes > 0 ? (size_t)proto.flush_bytes : (size_t)2 * (size_t)(l2 > 0 ? l2 : (1 << 24));
  fbytes = (fbytes + 15) & ~(size_t)15;
  lua_settop(L, 2);
  /* graph mode: capture fn (rep calls) once, then time replays */
  int calls_per_launch = 1; /* calls of fn in one launch of the timed thing */
  if (graph_mode && !is_graph) {
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "km.cuda");
    if (lua_isnil(L, -1)) return luaL_error(L, "timing: graph mode needs km.cuda loaded");
    lua_getfield(L, -1, "capture");
    lua_pushvalue(L, 1);
    lua_pushinteger(L, rep);
    /* capture(function() for i = 1, rep do fn() end end) */
    luaL_loadstring(L, "local fn, rep = ...; return function() for _ = 1, rep do "
                       "local ok, msg = fn(); if ok == nil and msg then error(msg, 0) end end end");
    lua_insert(L, -3);
    lua_call(L, 2, 1);
    lua_call(L, 1, 3);
    if (lua_isnil(L, -3)) return 3;
    lua_pop(L, 2);
    lua_replace(L, 1); /* the graph is now the timed thing */
    lua_settop(L, 2);
    is_graph = 1;
    calls_per_launch = rep;
  }
  int per_sample_launches = is_graph && graph_mode ? 1 : rep;
  int per_sample_calls = per_sample_launches * calls_per_launch;
  /* hooks at fixed slots: [fn, opts, before, after] */
  lua_settop(L, 2);
  const int before = 3, after = 4;
  if (lua_istable(L, 2)) { lua_getfield(L, 2, "before"); lua_getfield(L, 2, "after"); }
  lua_settop(L, 4);
  luaL_argcheck(L, lua_isnil(L, before) || lua_isfunction(L, before), 2, "option 'before' must be a function");
  luaL_argcheck(L, lua_isnil(L, after) || lua_isfunction(L, after), 2, "option 'after' must be a function");

  CUstream s = km_cuda_stream();
  CUresult r;
  if (cold && (r = ensure_flush(L, fbytes)) != CUDA_SUCCESS) return km_cuda_fail(L, r, "allocating the L2 flush buffer");

  /* warmup: at least `warmup` calls and `warmup_ms` of wall time */
  double t0 = now_ms();
  for (int i = 0; i < warmup || (now_ms() - t0 < warmup_ms && i < 100000); i++) {
    if (call_hook(L, before, "warmup") || call_once(L, 1, is_graph) || call_hook(L, after, "warmup")) return 3;
    if ((i & 7) == 7 || i + 1 >= warmup) {
      if ((r = cu->cuStreamSynchronize(s)) != CUDA_SUCCESS) return km_cuda_fail(L, r, "warmup");
    }
  }
  if ((r = cu->cuStreamSynchronize(s)) != CUDA_SUCCESS) return km_cuda_fail(L, r, "warmup");

  double *samples = lua_newuserdatauv(L, sizeof(double) * (size_t)max_n * 2, 0); /* [.., samples] */
  evset *ev = lua_newuserdatauv(L, sizeof *ev, 0); /* [.., samples, events] */
  ev->made = 0;
  luaL_setmetatable(L, KM_TIMING_EVENTS_MT);
  lua_toclose(L, -1);
  const char *nvml_why = NULL;
  km_nvml_dev ndev = nvml_device(&nvml_why);
  clock_span clk = {NAN, NAN};
  double clock_start = sm_clock(L);
  clock_note(&clk, clock_start);
  km_energy_window ew = {0};
  if (ndev) km_energy_begin(&ew, ndev);
  km_energy_window *ewp = ndev && !ew.status ? &ew : NULL;

  /* The stop rule (km_sampling_core) is asked at every sample, in order, so n is the first
   * count that satisfies it, whatever was queued. Samples are queued ahead as far as
   * km_sampler_plan says: enough that the GPU does not wait while the host reads, decides
   * and enqueues (sized from the measured time per sample and per enqueue), never more than
   * the rule may need. Samples queued beyond the stop (n_extra) ran, hooks and all, and are
   * waited for, but do not enter the statistics. */
  sampler sp = {L, cu, ev, s, cold, is_graph, per_sample_launches, before, after, fbytes};
  km_sampler smp;
  km_sampler_init(&smp, &proto.stop, samples, samples + max_n);
  km_pace pace = {0, 0, want_energy && ewp ? ENERGY_SLACK_MS : SLACK_MS, 0, 0, SLOTS - 1};
  int queued = 0, taken = 0, rc;
  double start = now_ms();
  for (;;) {
    pace.elapsed_ms = now_ms() - start;
    pace.hold = want_energy && ewp && !km_energy_enough(&ew);
    int target = km_sampler_plan(&smp, queued, &pace);
    if (target > queued) {
      double h0 = now_ms();
      int k = target - queued;
      for (; queued < target; queued++)
        if ((rc = enqueue(&sp, queued, &r))) goto enqueue_fail;
      double h = (now_ms() - h0) / k;
      pace.host_ms = pace.host_ms > 0 ? 0.75 * pace.host_ms + 0.25 * h : h;
    }
    if (smp.stop != KM_SAMPLE_ON || taken >= queued) break;
    if (ndev && taken % 16 == 0) { /* NVML's SM clock, read while samples run */
      unsigned mhz = 0;
      const char *clock_why;
      if (km_nvml_sm_clock(ndev, &mhz, &clock_why) == 0) clock_note(&clk, mhz);
    }
    if ((r = wait_sample(cu, ev, taken, queued, ewp, per_sample_calls)) != CUDA_SUCCESS) goto cuda_fail;
    double seen = now_ms() - start;
    do { /* every sample completed so far, in order, each one put to the rule */
      float ms = 0, gap = 0;
      if ((r = cu->cuEventElapsedTime(&ms, EV(ev, taken, 0), EV(ev, taken, 1))) != CUDA_SUCCESS) goto cuda_fail;
      /* end to end: the GPU's time per sample, flush and hook work included */
      if (taken > 0 && cu->cuEventElapsedTime(&gap, EV(ev, taken - 1, 1), EV(ev, taken, 1)) == CUDA_SUCCESS && gap > 0)
        pace.sample_ms = pace.sample_ms > 0 ? 0.75 * pace.sample_ms + 0.25 * gap : gap;
      else if (taken == 0)
        pace.sample_ms = ms; /* the kernel alone: a first guess */
      taken++;
      int hold = want_energy && ewp && !km_energy_enough(&ew);
      if (km_sampler_add(&smp, (double)ms / per_sample_calls, seen, hold) != KM_SAMPLE_ON) break;
    } while (taken < queued && cu->cuEventQuery(EV(ev, taken, 1)) == CUDA_SUCCESS);
  }
  if (queued > taken && (r = wait_sample(cu, ev, queued - 1, queued, ewp, per_sample_calls)) != CUDA_SUCCESS)
    goto cuda_fail;
  int n = smp.n;
  const double *sorted = smp.sorted;
  double total = now_ms() - start;
  double energy_j = NAN, energy_ms = 0, energy_calls = 0;
  const char *energy_why = nvml_why ? nvml_why : "NVML unavailable";
  if (ndev && km_energy_end(&ew, &energy_j, &energy_ms, &energy_calls, &energy_why) != 0) energy_j = NAN;
  evset_free(ev);
  double clock_end = sm_clock(L);
  clock_note(&clk, clock_end);

  lua_createtable(L, 0, 26);
  lua_pushnumber(L, km_stats_quantile(sorted, n, 0.5)); lua_setfield(L, -2, "median");
  lua_pushnumber(L, smp.sum_ms / n); lua_setfield(L, -2, "mean");
  lua_pushnumber(L, sorted[0]); lua_setfield(L, -2, "min");
  lua_pushnumber(L, sorted[n - 1]); lua_setfield(L, -2, "max");
  lua_pushnumber(L, km_stats_quantile(sorted, n, 0.25)); lua_setfield(L, -2, "p25");
  lua_pushnumber(L, km_stats_quantile(sorted, n, 0.75)); lua_setfield(L, -2, "p75");
  lua_pushinteger(L, n); lua_setfield(L, -2, "n");
  lua_pushinteger(L, queued - n); lua_setfield(L, -2, "n_extra");
  lua_pushstring(L, km_stop_name(smp.stop)); lua_setfield(L, -2, "stop");
  lua_pushnumber(L, smp.noise); lua_setfield(L, -2, "rel_noise");
  lua_pushstring(L, proto.mode); lua_setfield(L, -2, "mode");
  lua_pushinteger(L, rep); lua_setfield(L, -2, "rep");
  lua_pushnumber(L, total); lua_setfield(L, -2, "total_ms");
  lua_pushnumber(L, clock_end); lua_setfield(L, -2, "sm_clock_mhz");
  lua_pushnumber(L, clock_start); lua_setfield(L, -2, "sm_clock_start_mhz");
  lua_pushnumber(L, clk.lo); lua_setfield(L, -2, "sm_clock_min_mhz");
  lua_pushnumber(L, clk.hi); lua_setfield(L, -2, "sm_clock_max_mhz");
  lua_pushboolean(L, clk.hi > clk.lo * (1 + CLOCK_MOVED)); lua_setfield(L, -2, "clock_moved");
  if (energy_j == energy_j) {
    lua_pushnumber(L, energy_j); lua_setfield(L, -2, "energy_j");
    lua_pushnumber(L, energy_ms); lua_setfield(L, -2, "energy_window_ms");
    lua_pushnumber(L, energy_calls); lua_setfield(L, -2, "energy_calls");
    if (cold) { lua_pushboolean(L, 1); lua_setfield(L, -2, "energy_includes_flush"); }
  } else {
    lua_pushstring(L, energy_why); lua_setfield(L, -2, "energy_unavailable");
  }
  if (cold) { lua_pushinteger(L, (lua_Integer)fbytes); lua_setfield(L, -2, "flush_bytes"); }
  push_protocol(L, &proto);
  lua_setfield(L, -2, "protocol");
  if (keep) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
      lua_pushnumber(L, samples[i]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "samples");
  }
  return 1;
cuda_fail:
  return km_cuda_fail(L, r, "timing");
enqueue_fail:
  if (rc == 3) return 3; /* the events are closed on return */
  return km_cuda_fail(L, r, "timing");
}

static int launch_empty(lua_State *L) {
  CUfunction fn = (CUfunction)lua_touserdata(L, lua_upvalueindex(1));
  CUresult r = km_cu->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, km_cuda_stream(), NULL, NULL);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "empty kernel");
  return 0;
}

/* timing.floor() -> the empty kernel timed in warm mode; measured once per process */
static int timing_floor(lua_State *L) {
  km_cuda_check(L);
  if (lua_getfield(L, lua_upvalueindex(1), "floor") == LUA_TTABLE) return 1;
  lua_settop(L, 0);
  lua_pushlightuserdata(L, (void *)km_cuda_util(L, "km_empty"));
  lua_pushcclosure(L, launch_empty, 1);
  lua_createtable(L, 0, 3);
  lua_pushliteral(L, "warm");
  lua_setfield(L, -2, "mode");
  lua_pushinteger(L, 50);
  lua_setfield(L, -2, "min_samples");
  lua_pushinteger(L, 200);
  lua_setfield(L, -2, "max_samples");
  lua_pushcfunction(L, l_time);
  lua_insert(L, 1);
  lua_call(L, 2, 3);
  if (lua_isnil(L, -3)) return 3;
  lua_pop(L, 2);
  lua_pushvalue(L, -1);
  lua_setfield(L, lua_upvalueindex(1), "floor");
  return 1;
}

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

/* timing.peaks() -> { bandwidth_gbs, fp32_tflops }: this device's measured ceilings (a
 * 16-byte copy of 2 x 512 MiB counting bytes read and written; 8 FMA chains per thread on
 * every SM). Measured once per process; the roofline bound of a task uses them. */
static int l_peaks(lua_State *L) {
  const km_cuda_api *cu = km_cuda_check(L);
  if (lua_getfield(L, lua_upvalueindex(1), "peaks") == LUA_TTABLE) return 1;
  lua_pop(L, 1);
  size_t bytes = (size_t)512 << 20;
  CUdeviceptr src, dst;
  CUresult r = cu->cuMemAlloc(&src, bytes);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "peaks: allocating");
  if ((r = cu->cuMemAlloc(&dst, bytes)) != CUDA_SUCCESS) { cu->cuMemFree(src); return km_cuda_fail(L, r, "peaks: allocating"); }
  cu->cuMemsetD32(src, 0x3f800000, bytes / 4);
  uint64_t n = bytes / 16;
  void *cargs[] = {&dst, &src, &n};
  double copy_ms = 0, fma_ms = 0;
  r = best_ms(km_cuda_util(L, "km_copy"), n, cargs, 6, 0, &copy_ms);
  int sms = 0;
  cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, km_cuda_device());
  int iters = 4096;
  float a = 0.999f, bb = 0.001f;
  void *fargs[] = {&dst, &iters, &a, &bb};
  unsigned grid = (unsigned)sms * 8;
  if (r == CUDA_SUCCESS) r = best_ms(km_cuda_util(L, "km_fma"), 0, fargs, 6, grid, &fma_ms);
  cu->cuMemFree(src);
  cu->cuMemFree(dst);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "peaks");
  lua_createtable(L, 0, 2);
  lua_pushnumber(L, 2.0 * (double)bytes / (copy_ms * 1e-3) / 1e9);
  lua_setfield(L, -2, "bandwidth_gbs");
  lua_pushnumber(L, (double)grid * 256 * iters * 16 / (fma_ms * 1e-3) / 1e12);
  lua_setfield(L, -2, "fp32_tflops");
  lua_pushvalue(L, -1);
  lua_setfield(L, lua_upvalueindex(1), "peaks");
  return 1;
}

/* timing.wall() -> seconds on the monotonic clock (for host-side durations) */
static int l_wall(lua_State *L) {
  lua_pushnumber(L, now_ms() / 1e3);
  return 1;
}

int luaopen_km_timing(lua_State *L) {
  static const luaL_Reg fns[] = {{"time", l_time}, {"sm_clock", l_sm_clock}, {"wall", l_wall}, {"protocol_key", l_protocol_key},
                                  {"protocol", l_protocol}, {NULL, NULL}};
  static const luaL_Reg no_methods[] = {{NULL, NULL}};
  km_newclass(L, KM_TIMING_EVENTS_MT, no_methods, evset_gc);
  luaL_newlib(L, fns);
  lua_newtable(L); /* cache shared by floor() and peaks() */
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, timing_floor, 1);
  lua_setfield(L, -3, "floor");
  lua_pushcclosure(L, l_peaks, 1);
  lua_setfield(L, -2, "peaks");
  return 1;
}
