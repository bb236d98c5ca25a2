/* km_timer_core.h — the one timing loop. km.timing (km_timing.c) and the C API's km_time
 * (kmrun_api.c) are thin bindings over it; docs/timing.md says what it does and why.
 *
 * Pure C: no lua_State, no driver. The device is reached through a km_timer_ops table:
 * km_timer_gpu.c's drives CUDA events on the launch stream, the L2 flush, graph capture,
 * the SM clock probe and NVML; tests/c/test_timer.c's is a simulated GPU on a fake clock.
 * The stop rule, the pacing of queued samples and the protocol are km_sampling_core.h's.
 *
 * Ownership: the caller owns everything a run touches: the ops' device state, the work's
 * state and the sample buffer (KM_TIMER_BUF(max_samples) doubles). km_timer_run allocates
 * nothing and keeps nothing once it returns, so a callback may leave it by longjmp (a Lua
 * error) and nothing leaks that the caller's own unwinding does not release.
 *
 * One run: in graph mode, `rep` calls of the work are captured into a graph once (unless the
 * work already launches a graph) and its replays are timed; then warm-up calls (at least
 * `warmup` and `warmup_ms`, less the work's `warmed` calls made before); then samples. A
 * sample is before(sample), the L2 flush (cold mode), start event, the timed calls, end
 * event, after(sample), all enqueued. Samples are queued ahead as far as km_sampler_plan says
 * and put to the stop rule one at a time, in order, so n is the first count that satisfies it
 * whatever was queued; samples queued past the stop (n_extra) run and are waited for but are
 * not counted.
 *
 * The gate (protocol's gate, with ops that have one): each sample's start event is enqueued
 * behind a gate (after the before hook's work and the flush, which run meanwhile) that the
 * host opens once the sample's end event is enqueued, so the GPU starts the timed window
 * only when all of it is there. A host
 * slower than the GPU (a Python model's forward launching its kernels one by one) then leaves
 * the GPU idle before a sample, never inside its timed window: the time is the work's GPU
 * time, not the host's launch gaps (nvbench's blocking kernel, per sample). A gate opens by
 * itself after 4 times the longest warm-up call's host time (the first call's only where it
 * is the only one; at least 50 ms, at most 2 s):
 * one opened so means the host waited for the GPU while enqueueing (the work synchronized),
 * and gating stops for the rest of the run; gate_timeouts says so.
 *
 * The gate's page is host memory the device reads and writes, so a kernel that learned its
 * address can write it too (open every later gate at once, hide or fake a timeout). The host
 * keeps a shadow of it (km_gate_shadow: what it last wrote, what it last saw) and the loop
 * compares the page with it (ops->gate_check) at the start of the run, before each gate, after
 * each release and at the end: a difference is tampering. The page is put back and the run
 * fails with KM_TIMER_ETAMPERED (gate_tampered, gate_tamper_what, what says where). */
#ifndef KM_TIMER_CORE_H
#define KM_TIMER_CORE_H

#include <stddef.h>

#include "km_sampling_core.h"

#define KM_TIMER_SLOTS 64                  /* samples in flight at most: SLOTS - 1 */
#define KM_TIMER_EVENTS (2 * KM_TIMER_SLOTS) /* (start, end) event pairs, by slot */
#define KM_TIMER_PENDING (-1)              /* ops->query: the event is not reached yet */
#define KM_TIMER_BUF(max_samples) (2 * (size_t)(max_samples)) /* doubles a run needs */

typedef enum { KM_TIMER_CAPTURE, KM_TIMER_WARMUP, KM_TIMER_SAMPLE } km_timer_phase;

/* "capture", "warmup", "sample" */
const char *km_timer_phase_name(km_timer_phase ph);

/* The device. Operations return 0 or the device's own error code (a CUresult on the GPU),
 * which the loop hands back with what it was doing; `dev` is the ops' state. Events are
 * numbered 0 .. KM_TIMER_EVENTS-1 and made on first use. */
typedef struct km_timer_ops {
  double (*now_ms)(void *dev);                 /* host monotonic clock */
  void (*pause)(void *dev);                    /* ~200 us of host sleep while polling */
  int (*record)(void *dev, int ev);            /* enqueue event ev */
  int (*query)(void *dev, int ev);             /* 0: reached; KM_TIMER_PENDING; or an error */
  int (*wait)(void *dev, int ev);              /* block until ev is reached */
  int (*elapsed)(void *dev, int from, int to, float *ms);
  int (*sync)(void *dev);                      /* wait for everything enqueued */
  int (*flush_prepare)(void *dev, long long want, size_t *bytes, const char **what); /* want 0: 2 x L2 */
  int (*flush)(void *dev);                     /* enqueue the L2 flush */
  int (*capture_begin)(void *dev, const char **what); /* graph mode: capture what is enqueued */
  int (*capture_end)(void *dev, int keep, const char **what); /* keep: make it replayable */
  int (*replay)(void *dev);                    /* enqueue the captured graph */
  /* Optional (NULL: not measured). probe enqueues a clock probe into slot 0 (before the first
   * sample) or 1 (after the last); probe_read waits for that slot's probe and gives its MHz
   * (NaN on failure). read_clock is a cheap reading taken while samples run (NVML). */
  int (*probe)(void *dev, int slot);
  double (*probe_read)(void *dev, int slot);
  int (*read_clock)(void *dev, double *mhz);
  /* An energy window over the samples (km_nvml_lib.h): 0 when open, else *why says why not. */
  int (*energy_begin)(void *dev, const char **why);
  void (*energy_poll)(void *dev, double calls_done);
  int (*energy_enough)(void *dev);
  int (*energy_end)(void *dev, double *j_per_call, double *span_ms, double *calls, const char **why);
  /* Optional (NULL: no gate). gate enqueues a hold: work enqueued after it waits on the GPU
   * until release, or until timeout_ms have passed since the GPU reached it (a host that waits
   * for the GPU while the hold is on would otherwise never get there); release opens every
   * gate enqueued so far.
   * gate_timeouts is how many gates have opened by their timeout since the run began. */
  int (*gate)(void *dev, double timeout_ms);
  void (*release)(void *dev);
  int (*gate_timeouts)(void *dev);
  /* Optional (NULL: the page is not checked). gate_check compares the gate's page with its
   * shadow and puts back what differs (km_gate_check); returns what differed (KM_GATE_*, 0:
   * nothing). settled: every gate this run enqueued has run (none may time out any more). */
  int (*gate_check)(void *dev, int settled);
} km_timer_ops;

/* What is timed. call enqueues one call of the work; before and after (optional) run around
 * every warm-up call and every sample (counted or queued past the stop), outside the timed
 * window, never during a capture. Each returns 0, or non-zero to stop timing: the run then
 * returns KM_TIMER_EWORK and the binding knows why. */
typedef struct km_timer_work {
  int (*call)(void *ud, km_timer_phase phase);
  int (*before)(void *ud, km_timer_phase phase);
  int (*after)(void *ud, km_timer_phase phase);
  void *ud;
  int is_graph; /* call launches a graph already: graph mode replays it as is, once a sample */
  /* calls of the work the caller made just before, at the same size (e.g. the judge's last
   * verify trial): they count toward the protocol's `warmup` calls, which is met with fewer
   * (none, where warmed >= warmup) of its own; the protocol, and so its key, is unchanged */
  int warmed;
  /* the after hook waits for its sample (the judge's check of every timed call): samples are
   * enqueued one at a time, none queued past the stop (n_extra 0); n is unchanged */
  int serial;
} km_timer_work;

enum { KM_TIMER_OK = 0, KM_TIMER_EDEV = -1, KM_TIMER_EWORK = -2, KM_TIMER_EINVAL = -3, KM_TIMER_ETAMPERED = -4 };

typedef struct km_timer_result {
  double median, mean, min, max, p25, p75; /* ms per call of the work */
  double rel_noise, total_ms;
  int n, n_extra;         /* samples counted; samples queued past the stop (run, not counted) */
  int warmup_calls;       /* warm-up calls this run made (the work's `warmed` calls not among them) */
  km_stop stop;
  const double *samples;  /* the n counted samples in the order taken (the caller's buffer) */
  size_t flush_bytes;     /* cold mode: bytes written before each sample */
  double sm_clock_start, sm_clock_end, sm_clock_min, sm_clock_max; /* MHz; NaN: not measured */
  int clock_moved;        /* max > min by more than 2%: not all samples ran at one clock */
  int gated;              /* samples enqueued behind a gate (0: the protocol's gate is off or no ops) */
  int gate_timeouts;      /* gates that opened by their timeout: gating stopped at the first */
  double gate_timeout_ms; /* a gate's timeout: 4 x the longest warm-up call's host time, 50..2000 ms
                             (0: not gated) */
  int gate_tampered;      /* checks that found the gate's page written by someone else: the run
                             stops at the first (KM_TIMER_ETAMPERED), so 0 or 1 */
  int gate_tamper_what;   /* KM_GATE_* found written (km_gate_what names them) */
  double energy_j, energy_ms, energy_calls; /* energy_j NaN: energy_why says why */
  /* The run's end on the host, ms after the last sample was enqueued (its after hook
   * returned): the samples read and the stop decided, the closing clock probe done, the run
   * over. What the host spends there the GPU waits for (bench/measure_profile.lua). */
  double tail_read_ms, tail_probe_ms, tail_ms;
  const char *energy_why;
  int err;                /* KM_TIMER_EDEV: the device's error code ... */
  const char *what;       /* ... and what the run was doing ("timing", "warmup", ...) */
} km_timer_result;

/* Times w under protocol p (valid: km_stop_rule_valid, rep >= 1, warmup >= 0) into *out.
 * buf holds KM_TIMER_BUF(p->stop.max_samples) doubles. Returns KM_TIMER_OK; KM_TIMER_EDEV
 * (out->err, out->what); KM_TIMER_EWORK (the work or a hook stopped it); KM_TIMER_ETAMPERED
 * (the gate's page was written: out->gate_tamper_what, and out->what says where it was found;
 * the timing is void); KM_TIMER_EINVAL. */
int km_timer_run(const km_timer_ops *ops, void *dev, const km_timing_protocol *p, const km_timer_work *w,
                 double *buf, km_timer_result *out);

/* ==== the gate's page and its shadow ====
 * The page: `released`, which the host raises to open every gate up to that ticket, and
 * `timeouts`, which the device's gate kernel raises when a gate opens by its timeout. Nothing
 * else may write it; a kernel can (it is mapped into the device). The shadow holds what the
 * host last wrote to `released` and last saw in `timeouts`. Plain memory here: km_timer_gpu.c
 * keeps the process's page (pinned host memory) and shadow under its lock; test_timer.c a
 * simulated one. */
typedef struct km_gate_page {
  volatile unsigned long long released;
  volatile unsigned long long timeouts;
} km_gate_page;

#define KM_GATE_RELEASED 1 /* released is not what the host last wrote */
#define KM_GATE_TIMEOUTS 2 /* timeouts fell, or rose while no gate could have timed out */

typedef struct km_gate_shadow {
  unsigned long long released, timeouts;
  int found;                  /* KM_GATE_RELEASED found by a release, for the next check to report */
  unsigned long long tampered; /* checks that found a difference, ever */
} km_gate_shadow;

/* Raises released to ticket (never lowers it). A page found not holding what the host last
 * wrote is noted (sh->found) before it is overwritten, so the release does not hide it. */
void km_gate_release(km_gate_page *pg, km_gate_shadow *sh, unsigned long long ticket);
/* Compares the page with the shadow and puts back what differs; returns what differed
 * (KM_GATE_*, with what releases noted since the last check). may_rise: a gate may have timed
 * out since the last check, so timeouts may have risen (the shadow follows it). */
int km_gate_check(km_gate_page *pg, km_gate_shadow *sh, int may_rise);
/* "released written", "timeouts written", "released and timeouts written" ("" for 0) */
const char *km_gate_what(int what);

#endif
