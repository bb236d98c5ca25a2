/* km_timing.c — `require "km.timing"`: time GPU work with CUDA events.
 *
 *   timing.time(fn_or_graph, { mode = "cold"|"warm"|"graph", warmup = 3, warmup_ms = 5,
 *                              min_samples = 20, max_samples = 300, target = 0.002,
 *                              max_ms = 2000, rep = 1, flush_bytes = 2*L2, samples = false })
 *                              energy = false, before = fn(phase), after = fn(phase) })
 *     -> { median, mean, min, max, p25, p75, n, rel_noise, mode, rep, total_ms, samples?,
 *          sm_clock_mhz, sm_clock_start_mhz, sm_clock_min_mhz, sm_clock_max_mhz, clock_moved,
 *          energy_j?, energy_window_ms?, energy_calls?, energy_includes_flush?,
 *          energy_unavailable? }
 *        (times in ms per call of fn)
 *        | nil, msg, code when fn (or CUDA) reports a failure; an error fn raises is
 *          raised again after the CUDA events are released
 *   timing.floor()     -> the empty-kernel launch floor (warm mode), measured once
 *   timing.sm_clock()  -> SM clock in MHz while a kernel runs (clock64 vs %globaltimer)
 *
 * fn enqueues work on km.cuda's current stream and returns nothing (or nil, msg, code on
 * failure). Cold mode writes a scratch buffer twice the L2 size before every sample so no
 * sample finds its data in cache; warm mode runs back to back; graph mode captures fn once
 * into a CUDA graph and times its replays (for tiny kernels, where launch cost dominates).
 * Sampling stops when the median's relative standard error falls below `target`, or at
 * max_samples, or after max_ms.
 *
 * Hooks: before(phase) runs before each warm-up call and before each sample (ahead of its L2
 * flush), after(phase) after each warm-up call and after each sample's end event; phase is
 * "warmup" or "sample". Both run outside the timed window (a sample of rep > 1 calls gets one
 * pair); work they enqueue goes to the stream in order. A hook returning nil, msg [, code]
 * stops timing with that failure. In graph mode they run around each replay, never during
 * the capture.
 *
 * Clocks: the SM clock is probed (km_clock_probe) just before the first sample and after
 * the last (sm_clock_start_mhz, sm_clock_mhz); where NVML is there its SM clock is also read
 * once per batch of samples while the batch runs. sm_clock_min/max_mhz span all of these;
 * clock_moved is true when max exceeds min by more than CLOCK_MOVED (2%): the samples were
 * not all taken at one clock, so compare such a time with care.
 *
 * Energy (NVML, km_nvml.h): NVML's energy counter moves in steps (~100 ms apart on the
 * H200), so while each batch runs the host polls it (instead of blocking on the batch's last
 * event) and notes, at each step, how many timed calls had completed. energy_j = the energy
 * between the first and the last step seen / the calls completed between them (energy_calls,
 * over energy_window_ms). It is the whole device's energy: the host gaps between samples are
 * in it, and in cold mode so are the L2 flushes (energy_includes_flush). Fewer than two steps,
 * or steps under KM_ENERGY_MIN_MS (100 ms) apart, give energy_unavailable (a reason) instead
 * of a number; with `energy = true` sampling goes on (within max_samples and max_ms) until
 * there are enough. Without NVML, energy_unavailable says why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_stats_core.h"
#include "km_cuda.h"
#include "km_nvml.h"

#define BATCH 16
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
 * own, a budget stop) releases them while it unwinds, and the error goes on unchanged. */
typedef struct {
  CUevent ev[2 * 2 * BATCH]; /* two halves of BATCH (start, end) pairs: one runs, one fills */
  int made;
} evset;
#define EV(e, half, i, end) ((e)->ev[(half) * 2 * BATCH + 2 * (i) + (end)])

static void evset_free(evset *e) {
  for (int i = 0; i < e->made; i++) km_cu->cuEventDestroy(e->ev[i]);
  e->made = 0;
}

static int evset_gc(lua_State *L) {
  evset_free(luaL_checkudata(L, 1, KM_TIMING_EVENTS_MT));
  return 0;
}

/* The NVML handle of the CUDA device in use, looked up by UUID once per process (NVML and
 * CUDA may number devices differently). NULL with *why when there is none. */
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
typedef struct {
  lua_State *L;
  const km_cuda_api *cu;
  evset *ev;
  CUstream s;
  int cold, is_graph, per_sample_launches, before, after;
  size_t fbytes;
} sampler;

/* Enqueues b samples into half h: before hook, L2 flush, start event, the calls, end event,
 * after hook. Returns 0; 3 with nil, msg, code pushed (fn or a hook failed); -1 with *r. */
static int enqueue(sampler *sp, int h, int b, CUresult *r) {
  lua_State *L = sp->L;
  for (int i = 0; i < b; i++) {
    if (call_hook(L, sp->before, "sample")) return 3;
    if (sp->cold && (*r = flush_l2(L, sp->s, sp->fbytes)) != CUDA_SUCCESS) return -1;
    if ((*r = sp->cu->cuEventRecord(EV(sp->ev, h, i, 0), sp->s)) != CUDA_SUCCESS) return -1;
    for (int k = 0; k < sp->per_sample_launches; k++)
      if (call_once(L, 1, sp->is_graph)) return 3;
    if ((*r = sp->cu->cuEventRecord(EV(sp->ev, h, i, 1), sp->s)) != CUDA_SUCCESS) return -1;
    if (call_hook(L, sp->after, "sample")) return 3;
  }
  return 0;
}

/* Samples of half h that have completed (end events complete in stream order). */
static int completed(const km_cuda_api *cu, evset *ev, int h, int b) {
  int done = 0;
  while (done < b && cu->cuEventQuery(EV(ev, h, done, 1)) == CUDA_SUCCESS) done++;
  return done;
}

/* Waits for half h (b samples) to finish. With an energy window, polls NVML's counter every
 * 200 us meanwhile instead of blocking, telling it at each poll how many calls had completed
 * (calls0 before this half; the next half, already queued, counts once h is done). The wait
 * is on the host only: the GPU's timeline is the same as with a blocking synchronisation. */
static CUresult wait_half(const km_cuda_api *cu, evset *ev, int h, int b, int next_b, km_energy_window *w,
                          double calls0, int per_sample) {
  if (!w) return cu->cuEventSynchronize(EV(ev, h, b - 1, 1));
  for (;;) {
    CUresult r = cu->cuEventQuery(EV(ev, h, b - 1, 1));
    if (r == CUDA_SUCCESS) break;
    if (r != CUDA_ERROR_NOT_READY) return r;
    km_energy_poll(w, calls0 + (double)completed(cu, ev, h, b - 1) * per_sample);
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  km_energy_poll(w, calls0 + (double)(b + completed(cu, ev, 1 - h, next_b)) * per_sample);
  return CUDA_SUCCESS;
}

/* The sample array lives in a userdata so an error inside fn leaks nothing. */
static int l_time(lua_State *L) {
  const km_cuda_api *cu = km_cuda_check(L);
  int is_graph = luaL_testudata(L, 1, "km.Graph") != NULL;
  if (!is_graph) luaL_checktype(L, 1, LUA_TFUNCTION);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  const char *mode = km_optfield_str(L, 2, "mode", "cold");
  int cold = !strcmp(mode, "cold"), graph_mode = !strcmp(mode, "graph");
  if (!cold && !graph_mode && strcmp(mode, "warm"))
    return luaL_error(L, "timing: unknown mode '%s' (cold, warm, graph)", mode);
  int warmup = (int)km_optfield_int(L, 2, "warmup", 3);
  double warmup_ms = km_optfield_num(L, 2, "warmup_ms", 5);
  int min_n = (int)km_optfield_int(L, 2, "min_samples", 20);
  int max_n = (int)km_optfield_int(L, 2, "max_samples", 300);
  double target = km_optfield_num(L, 2, "target", 0.002);
  double max_ms = km_optfield_num(L, 2, "max_ms", 2000);
  int rep = (int)km_optfield_int(L, 2, "rep", 1);
  int keep = km_optfield_bool(L, 2, "samples", 0);
  int want_energy = km_optfield_bool(L, 2, "energy", 0);
  if (min_n < 1 || max_n < min_n || rep < 1 || warmup < 0)
    return luaL_error(L, "timing: need 1 <= min_samples <= max_samples, rep >= 1, warmup >= 0");
  int sm = 0, l2 = 0;
  cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, km_cuda_device());
  cu->cuDeviceGetAttribute(&sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, km_cuda_device());
  size_t fbytes = (size_t)km_optfield_int(L, 2, "flush_bytes", (lua_Integer)2 * (l2 > 0 ? l2 : (1 << 24)));
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
  double *sorted = samples + max_n;
  evset *ev = lua_newuserdatauv(L, sizeof *ev, 0); /* [.., samples, events] */
  ev->made = 0;
  luaL_setmetatable(L, KM_TIMING_EVENTS_MT);
  lua_toclose(L, -1);
  for (int i = 0; i < 2 * 2 * BATCH; i++) {
    if ((r = cu->cuEventCreate(&ev->ev[i], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) return km_cuda_fail(L, r, "creating events");
    ev->made++;
  }
  const char *nvml_why = NULL;
  km_nvml_dev ndev = nvml_device(&nvml_why);
  clock_span clk = {NAN, NAN};
  double clock_start = sm_clock(L);
  clock_note(&clk, clock_start);
  km_energy_window ew = {0};
  if (ndev) km_energy_begin(&ew, ndev);
  /* Batches are double-buffered: the next batch is queued before waiting for the current
   * one, so the GPU does not idle while the host collects, sorts and launches (idle gaps
   * would also enter the energy per call). A stop decided on one batch still collects the
   * batch already queued behind it: those samples are as valid as the rest. */
  sampler sp = {L, cu, ev, s, cold, is_graph, per_sample_launches, before, after, fbytes};
  km_energy_window *ewp = ndev && !ew.status ? &ew : NULL;
  int n = 0, cur = 0, bcur = max_n < BATCH ? max_n : BATCH, queued = bcur, rc;
  double noise = INFINITY;
  double start = now_ms();
  if ((rc = enqueue(&sp, cur, bcur, &r))) goto enqueue_fail;
  for (int last = 0; !last;) {
    int bnext = max_n - queued < BATCH ? max_n - queued : BATCH;
    if (bnext > 0 && (rc = enqueue(&sp, 1 - cur, bnext, &r))) goto enqueue_fail;
    queued += bnext;
    unsigned mhz = 0; /* read while the batches run */
    const char *clock_why;
    if (ndev && km_nvml_sm_clock(ndev, &mhz, &clock_why) == 0) clock_note(&clk, mhz);
    if ((r = wait_half(cu, ev, cur, bcur, bnext, ewp, (double)n * per_sample_calls, per_sample_calls)) != CUDA_SUCCESS) goto cuda_fail;
    for (int i = 0; i < bcur; i++) {
      float ms = 0;
      if ((r = cu->cuEventElapsedTime(&ms, EV(ev, cur, i, 0), EV(ev, cur, i, 1))) != CUDA_SUCCESS) goto cuda_fail;
      samples[n++] = (double)ms / per_sample_calls;
    }
    memcpy(sorted, samples, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), km_stats_cmp_double);
    noise = km_stats_rel_noise(sorted, n);
    int energy_short = want_energy && ewp && !km_energy_enough(&ew);
    last = bnext <= 0 || (n >= min_n && noise <= target && !energy_short) ||
           (now_ms() - start > max_ms && n >= (min_n < 3 ? min_n : 3));
    if (last && bnext > 0) { /* collect what is already queued, then stop */
      cur = 1 - cur, bcur = bnext;
      last = 0;
      max_n = queued; /* nothing more is queued: the next round's bnext is 0 */
    } else {
      cur = 1 - cur, bcur = bnext;
    }
  }
  double total = now_ms() - start;
  double energy_j = NAN, energy_ms = 0, energy_calls = 0;
  const char *energy_why = nvml_why ? nvml_why : "NVML unavailable";
  if (ndev && km_energy_end(&ew, &energy_j, &energy_ms, &energy_calls, &energy_why) != 0) energy_j = NAN;
  evset_free(ev);
  double clock_end = sm_clock(L);
  clock_note(&clk, clock_end);

  double sum = 0;
  for (int i = 0; i < n; i++) sum += samples[i];
  lua_createtable(L, 0, 22);
  lua_pushnumber(L, km_stats_quantile(sorted, n, 0.5)); lua_setfield(L, -2, "median");
  lua_pushnumber(L, sum / n); lua_setfield(L, -2, "mean");
  lua_pushnumber(L, sorted[0]); lua_setfield(L, -2, "min");
  lua_pushnumber(L, sorted[n - 1]); lua_setfield(L, -2, "max");
  lua_pushnumber(L, km_stats_quantile(sorted, n, 0.25)); lua_setfield(L, -2, "p25");
  lua_pushnumber(L, km_stats_quantile(sorted, n, 0.75)); lua_setfield(L, -2, "p75");
  lua_pushinteger(L, n); lua_setfield(L, -2, "n");
  lua_pushnumber(L, noise); lua_setfield(L, -2, "rel_noise");
  lua_pushstring(L, mode); lua_setfield(L, -2, "mode");
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
  if (keep) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
      lua_pushnumber(L, samples[i]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "samples");
  }
  (void)sm;
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
  static const luaL_Reg fns[] = {{"time", l_time}, {"sm_clock", l_sm_clock}, {"wall", l_wall}, {NULL, NULL}};
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
