/* test_timer.c — the timing loop (km_timer_core.c) driven through its ops by a simulated GPU on
 * a fake clock: where it stops, how far it queues ahead, the order of hooks, flushes, events
 * and calls, graph capture, failures, clocks and the energy window. The CUDA ops
 * (km_timer_gpu.c) are the GPU tests' (tests/gpu/test_timing*.lua).
 *
 * The simulated GPU runs what is enqueued in order: work arriving while it is busy starts when
 * the queue before it is done, an event is reached when the GPU gets to it, and the host's
 * clock moves only when it waits (and wakes wake_ms late), pauses, or pays host_ms for each
 * call or flush it enqueues. Behind a gate, what is enqueued is held and runs, in order, from
 * the release on. The gate's page is simulated too (a km_gate_page the host releases through
 * the core's km_gate_release and checks through km_gate_check): a gate whose ticket the page
 * has reached opens at once, and the work can write the page, as a kernel that learned its
 * address can. */
#include <math.h>
#include <stdlib.h>
#include "test.h"
#include "km_sampling_core.h"
#include "km_stats_core.h"
#include "km_timer_core.h"

#define MAXN 400
#define LOGMAX 20000

typedef struct {
  double now, gpu;          /* host clock; when the GPU's queue runs dry */
  double host_ms;           /* host time each enqueued call or flush costs */
  double first_warm_ms;     /* and the first warm-up call this much more (its set-up) */
  double wake_ms;           /* host wake-up latency after a blocking wait */
  double ev_at[KM_TIMER_EVENTS];
  int ev_made[KM_TIMER_EVENTS];
  int pending[KM_TIMER_SLOTS]; /* a sample's end recorded, not yet read */
  int slot_reused;          /* an event recorded over a sample not yet read */
  int in_flight, max_in_flight;
  int sampling;             /* the first sample has been enqueued */
  double idle;              /* GPU time idle since then, waiting for the host */
  double (*dur)(int k);     /* the k-th timed call's duration in the sample phase (ms) */
  double warm_ms, flush_ms;
  int sample_calls, warm_calls, capture_calls, replays;
  /* failure injection: the N-th operation of a kind fails (0: never) */
  int fail_record, records, fail_sync, syncs, fail_call, fail_before, befores, fail_after, afters;
  int fail_flush_prepare, fail_capture_begin;
  /* clocks and energy */
  double clocks[2];
  double probe_ms;          /* host time a clock probe's read takes */
  double probe_at[2];       /* when the GPU has run each slot's probe (-1: held behind a gate) */
  int sm_probes, clock_reads;
  int start_read_calls, start_read_releases; /* sample calls enqueued, releases, at the start probe's read */
  double energy_at;        /* energy_enough once the host clock passes it */
  int polls, pauses;
  double last_poll_calls;
  int poll_went_back;
  /* the gate: while held, GPU work and events wait in `pend` until the release */
  int held, gates, releases, timeout_after, waited_held;
  double gate_timeout_ms;   /* the last gate's timeout */
  /* its page: tickets handed out, the page and its shadow, a gate enqueued since the last
   * check (so a timeout may have been counted), checks made; a gate that opened at once */
  unsigned long long ticket, timeouts_base;
  km_gate_page page;
  km_gate_shadow shadow;
  int window, checks, opened_at_once;
  /* tampering: the N-th sample's call, before hook or after hook (1-based) writes the page */
  int tamper_call, tamper_before, tamper_after, tamper_how;
  struct { int ev; double ms; } pend[64];
  int npend;
  char log[LOGMAX];
  int len;
} fake;

static void note(fake *f, char c) {
  if (f->len < LOGMAX - 1) f->log[f->len++] = c, f->log[f->len] = 0;
}

/* GPU work of ms, enqueued now; then the host pays for enqueueing it. */
static void run_gpu(fake *f, double ms) {
  if (f->held) {
    f->pend[f->npend].ev = -1, f->pend[f->npend++].ms = ms;
    f->now += f->host_ms;
    return;
  }
  double start = f->gpu > f->now ? f->gpu : f->now;
  if (f->sampling && start > f->gpu) f->idle += start - f->gpu;
  f->gpu = start + ms;
  f->now += f->host_ms;
}

/* ---- ops ---- */

static double f_now(void *d) { return ((fake *)d)->now; }
static void f_pause(void *d) { fake *f = d; f->now += 0.2; f->pauses++; }

static int f_record(void *d, int ev) {
  fake *f = d;
  if (f->fail_record && ++f->records == f->fail_record) return 700;
  int slot = ev / 2;
  if (ev % 2 == 0) {
    if (f->pending[slot]) f->slot_reused = 1;
    f->sampling = 1;
  } else {
    f->pending[slot] = 1;
    if (++f->in_flight > f->max_in_flight) f->max_in_flight = f->in_flight;
  }
  f->ev_made[ev] = 1;
  if (f->held) {
    f->pend[f->npend].ev = ev, f->pend[f->npend++].ms = 0;
    note(f, ev % 2 ? 'E' : 'S');
    return 0;
  }
  f->ev_at[ev] = f->gpu > f->now ? f->gpu : f->now;
  if (f->sampling && f->ev_at[ev] > f->gpu) f->idle += f->ev_at[ev] - f->gpu;
  f->gpu = f->ev_at[ev];
  note(f, ev % 2 ? 'E' : 'S');
  return 0;
}

static int f_query(void *d, int ev) {
  fake *f = d;
  if (!f->ev_made[ev]) return 400;
  return f->ev_at[ev] <= f->now ? 0 : KM_TIMER_PENDING;
}

static int f_wait(void *d, int ev) {
  fake *f = d;
  if (!f->ev_made[ev]) return 400;
  if (f->held) f->waited_held = 1; /* would wait for ever on a GPU */
  if (f->ev_at[ev] > f->now) f->now = f->ev_at[ev] + f->wake_ms;
  note(f, 'W');
  return 0;
}

static int f_elapsed(void *d, int from, int to, float *ms) {
  fake *f = d;
  if (!f->ev_made[from] || !f->ev_made[to] || f->ev_at[to] > f->now) return 600;
  if (to == from + 1 && from % 2 == 0 && f->pending[from / 2]) f->pending[from / 2] = 0, f->in_flight--;
  *ms = (float)(f->ev_at[to] - f->ev_at[from]);
  return 0;
}

static int f_sync(void *d) {
  fake *f = d;
  if (f->fail_sync && ++f->syncs == f->fail_sync) return 999;
  if (f->gpu > f->now) f->now = f->gpu;
  note(f, 'Y');
  return 0;
}

static int f_flush_prepare(void *d, long long want, size_t *bytes, const char **what) {
  fake *f = d;
  if (f->fail_flush_prepare == 2) *what = "loading the flush";
  if (f->fail_flush_prepare) return 2;
  *bytes = want > 0 ? (size_t)want : 100 << 20;
  note(f, 'P');
  return 0;
}

static int f_flush(void *d) {
  fake *f = d;
  run_gpu(f, f->flush_ms);
  note(f, 'F');
  return 0;
}

static int capturing;
static int f_capture_begin(void *d, const char **what) {
  fake *f = d;
  if (f->fail_capture_begin) { *what = "creating a capture stream"; return 1; }
  capturing = 1;
  note(f, 'G');
  return 0;
}

static int f_capture_end(void *d, int keep, const char **what) {
  fake *f = d;
  capturing = 0;
  note(f, keep ? 'g' : 'x');
  return 0;
}

static int f_replay(void *d) {
  fake *f = d;
  f->replays++;
  for (int k = 0; k < f->capture_calls; k++)
    run_gpu(f, f->sampling ? f->dur(f->sample_calls++) : f->warm_ms);
  note(f, 'R');
  return 0;
}

/* A probe is GPU work of no time; its read waits for the GPU to reach it. */
static int f_probe(void *d, int slot) {
  fake *f = d;
  run_gpu(f, 0);
  f->probe_at[slot] = f->held ? -1 : f->gpu;
  note(f, 'K');
  return 0;
}
static double f_probe_read(void *d, int slot) {
  fake *f = d;
  if (f->probe_at[slot] < 0) { f->waited_held = 1; return NAN; } /* behind a held gate: for ever */
  if (f->probe_at[slot] > f->now) f->now = f->probe_at[slot] + f->wake_ms;
  f->now += f->probe_ms;
  if (slot == 0) f->start_read_calls = f->sample_calls, f->start_read_releases = f->releases;
  f->sm_probes++;
  note(f, 'k');
  return f->clocks[slot];
}
static int f_read_clock(void *d, double *mhz) { fake *f = d; f->clock_reads++; *mhz = 1050; return 0; }
static int f_energy_begin(void *d, const char **why) { (void)d; (void)why; return 0; }
static void f_energy_poll(void *d, double calls) {
  fake *f = d;
  f->polls++;
  if (calls < f->last_poll_calls) f->poll_went_back = 1;
  f->last_poll_calls = calls;
}
static int f_energy_enough(void *d) { fake *f = d; return f->now >= f->energy_at; }
static int f_energy_end(void *d, double *j, double *ms, double *calls, const char **why) {
  fake *f = d;
  (void)why;
  *j = 0.5, *ms = f->now, *calls = f->last_poll_calls;
  return 0;
}

/* A gate: held until the release, unless the page says its ticket is released already. The
 * timeout_after-th gate times out on the device, which counts it on the page. */
static int f_gate(void *d, double timeout_ms) {
  fake *f = d;
  f->gate_timeout_ms = timeout_ms;
  if (f->gates == 0) f->timeouts_base = f->page.timeouts; /* this run's first gate */
  f->ticket++;
  f->window = 1;
  f->gates++;
  if (f->timeout_after && f->gates == f->timeout_after) f->page.timeouts++;
  note(f, 'g');
  if (f->page.released >= f->ticket) f->opened_at_once++;
  else f->held = 1;
  return 0;
}

/* The held work runs from now (or when the GPU is free), back to back. */
static void f_release(void *d) {
  fake *f = d;
  if (f->ticket) km_gate_release(&f->page, &f->shadow, f->ticket);
  if (!f->held) return;
  f->held = 0;
  f->releases++;
  double t = f->gpu > f->now ? f->gpu : f->now;
  if (f->sampling && t > f->gpu) f->idle += t - f->gpu;
  for (int k = 0; k < f->npend; k++) {
    if (f->pend[k].ev >= 0) f->ev_at[f->pend[k].ev] = t;
    else t += f->pend[k].ms;
  }
  f->gpu = t;
  f->npend = 0;
  note(f, 'r');
}

/* The release as it was before the page was checked: released only ever raised, so a huge
 * value written by a kernel stays. */
static void f_release_raise_only(void *d) {
  fake *f = d;
  if (f->page.released < f->ticket) f->page.released = f->ticket;
  unsigned long long t = f->ticket;
  f->ticket = 0; /* f_release's own write skipped: only the held work runs */
  f_release(d);
  f->ticket = t;
}

static int f_gate_timeouts(void *d) {
  fake *f = d;
  return (int)(f->page.timeouts - f->timeouts_base);
}

/* The core's check on the simulated page: '+' in the log when clean, '!' when written. */
static int f_gate_check(void *d, int settled) {
  fake *f = d;
  int what = km_gate_check(&f->page, &f->shadow, f->window);
  if (settled) f->window = 0;
  f->checks++;
  note(f, what ? '!' : '+');
  return what;
}

/* What a kernel that learned the page's address writes. */
enum { OPEN = 1, OPEN_UNDONE, LOWER_TIMEOUTS, RAISE_TIMEOUTS };
#define HUGE_TICKET (1ull << 62)
static void tamper(fake *f) {
  switch (f->tamper_how) {
  case OPEN: f->page.released = HUGE_TICKET; break;
  case OPEN_UNDONE: { /* written, then put back by the same kernel before it ends */
    unsigned long long was = f->page.released;
    f->page.released = HUGE_TICKET;
    f->page.released = was;
    break;
  }
  case LOWER_TIMEOUTS: f->page.timeouts--; break;
  case RAISE_TIMEOUTS: f->page.timeouts++; break;
  }
  note(f, 'T');
}

static const km_timer_ops OPS = {f_now, f_pause, f_record, f_query, f_wait, f_elapsed, f_sync,
                                 f_flush_prepare, f_flush, f_capture_begin, f_capture_end, f_replay,
                                 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
static const km_timer_ops OPS_EXTRAS = {f_now, f_pause, f_record, f_query, f_wait, f_elapsed, f_sync,
                                        f_flush_prepare, f_flush, f_capture_begin, f_capture_end, f_replay,
                                        f_probe, f_probe_read, f_read_clock, f_energy_begin, f_energy_poll,
                                        f_energy_enough, f_energy_end, NULL, NULL, NULL, NULL};
static const km_timer_ops OPS_GATE = {f_now, f_pause, f_record, f_query, f_wait, f_elapsed, f_sync,
                                      f_flush_prepare, f_flush, f_capture_begin, f_capture_end, f_replay,
                                      NULL, NULL, NULL, NULL, NULL, NULL, NULL, f_gate, f_release, f_gate_timeouts,
                                      f_gate_check};
static const km_timer_ops OPS_GATE_PROBE = {f_now, f_pause, f_record, f_query, f_wait, f_elapsed, f_sync,
                                            f_flush_prepare, f_flush, f_capture_begin, f_capture_end, f_replay,
                                            f_probe, f_probe_read, NULL, NULL, NULL, NULL, NULL, f_gate, f_release,
                                            f_gate_timeouts, f_gate_check};
/* the gate as it was before its page was checked: what a written page does when nobody looks */
static const km_timer_ops OPS_GATE_UNCHECKED = {f_now, f_pause, f_record, f_query, f_wait, f_elapsed, f_sync,
                                                f_flush_prepare, f_flush, f_capture_begin, f_capture_end, f_replay,
                                                NULL, NULL, NULL, NULL, NULL, NULL, NULL, f_gate, f_release_raise_only,
                                                f_gate_timeouts, NULL};

/* ---- the work and hooks ---- */

static int w_call(void *ud, km_timer_phase ph) {
  fake *f = ud;
  if (ph == KM_TIMER_CAPTURE) {
    if (capturing == 0) return 1; /* captured outside a capture: a loop bug */
    f->capture_calls++;
    note(f, 'c');
    return f->fail_call < 0 ? 1 : 0;
  }
  if (ph == KM_TIMER_WARMUP) {
    if (f->warm_calls++ == 0) f->now += f->first_warm_ms;
    run_gpu(f, f->warm_ms);
    note(f, 'w');
    return 0;
  }
  if (f->fail_call > 0 && f->sample_calls + 1 == f->fail_call) return 1;
  run_gpu(f, f->dur(f->sample_calls++));
  note(f, 'C');
  return 0;
}

static int sample_befores, sample_afters; /* this run's, for tamper_before/after */

static int w_before(void *ud, km_timer_phase ph) {
  fake *f = ud;
  if (capturing) return 1;
  note(f, ph == KM_TIMER_SAMPLE ? 'B' : 'b');
  if (ph == KM_TIMER_SAMPLE && ++sample_befores == f->tamper_before) tamper(f);
  return f->fail_before && ++f->befores == f->fail_before;
}

static int w_after(void *ud, km_timer_phase ph) {
  fake *f = ud;
  note(f, ph == KM_TIMER_SAMPLE ? 'A' : 'a');
  if (ph == KM_TIMER_SAMPLE && ++sample_afters == f->tamper_after) tamper(f);
  return f->fail_after && ++f->afters == f->fail_after;
}

/* A Python forward: the call's GPU time in three launches, each costing the host host_ms.
 * The tamper_call-th sample's call writes the gate's page too. */
static int w_call_three(void *ud, km_timer_phase ph) {
  fake *f = ud;
  if (ph != KM_TIMER_SAMPLE) return w_call(ud, ph);
  double ms = f->dur(f->sample_calls++);
  for (int k = 0; k < 3; k++) run_gpu(f, ms / 3);
  note(f, 'C');
  if (f->sample_calls == f->tamper_call) tamper(f);
  return 0;
}

/* ---- series ---- */

/* 1 ms plus a pseudo-random spread of +-amp, in steps of 1/1024 ms so every sum and every
 * difference of event times is exact (the samples the loop reads equal the series). */
static double g_amp;
static double noisy(int i) {
  unsigned x = (unsigned)i * 2654435761u + 12345u;
  x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
  double u = (double)(x % 10001) / 5000.0 - 1.0;
  return 1.0 + floor(g_amp * u * 1024) / 1024;
}
static double one_ms(int i) { (void)i; return 1.0; }
static double ten_ms(int i) { (void)i; return 10.0; }
static double quarter_ms(int i) { (void)i; return 0.25; }
static double tiny(int i) { (void)i; return 1.0 / 1024; }

/* The first n >= min_n at which the series' first n samples meet the target, found by sorting
 * every prefix: independent of the sampler and of the loop. */
static int first_sufficient(double (*dur)(int), int min_n, int max_n, double target) {
  double buf[MAXN];
  for (int n = 1; n <= max_n; n++) {
    for (int i = 0; i < n; i++) buf[i] = dur(i);
    qsort(buf, (size_t)n, sizeof(double), km_stats_cmp_double);
    if (n >= min_n && km_stats_rel_noise(buf, n) <= target) return n;
  }
  return -1;
}

static km_timing_protocol proto(const char *mode, int rep, int min_n, int max_n, double target) {
  km_timing_protocol p;
  km_timing_protocol_default(&p);
  p.mode = mode;
  p.rep = rep;
  p.warmup = 2;
  p.warmup_ms = 0;
  p.stop.min_samples = min_n;
  p.stop.max_samples = max_n;
  p.stop.max_noise = target;
  p.stop.max_ms = 1e9;
  return p;
}

static fake *fresh(double (*dur)(int)) {
  static fake f;
  memset(&f, 0, sizeof f);
  f.dur = dur;
  f.warm_ms = 1;
  f.flush_ms = 0.5;
  f.energy_at = INFINITY;
  capturing = 0;
  sample_befores = sample_afters = 0;
  return &f;
}

/* A fresh fake for the next run in the same process: the gate's page, its shadow and the
 * tickets handed out are the process's, and stay. */
static fake *next_run(fake *prev, double (*dur)(int)) {
  unsigned long long released = prev->page.released, timeouts = prev->page.timeouts, ticket = prev->ticket;
  km_gate_shadow shadow = prev->shadow;
  fake *f = fresh(dur); /* the same static fake as prev */
  f->page.released = released;
  f->page.timeouts = timeouts;
  f->shadow = shadow;
  f->ticket = ticket;
  return f;
}

static int count(const fake *f, char c) {
  int k = 0;
  for (int i = 0; i < f->len; i++) k += f->log[i] == c;
  return k;
}

static double buf[KM_TIMER_BUF(MAXN)];

static int run(fake *f, const km_timer_ops *ops, const km_timing_protocol *p, int hooks, int is_graph,
               km_timer_result *r) {
  km_timer_work w = {w_call, hooks ? w_before : NULL, hooks ? w_after : NULL, f, is_graph, 0, 0};
  return km_timer_run(ops, f, p, &w, buf, r);
}

/* A warm run under the default stop rule, on a host that pays for what it enqueues and wakes
 * late after a blocking wait. */
static int run_warm_default(fake **f, double (*dur)(int), km_timer_result *r) {
  *f = fresh(dur);
  (*f)->host_ms = 0.001, (*f)->wake_ms = 0.1;
  km_timing_protocol p = proto("warm", 1, 20, 300, 0.002);
  return run(*f, &OPS, &p, 0, 0, r);
}

/* ==== where it stops ==== */

TEST(stops_at_the_first_sufficient_count) {
  double amps[] = {0.01, 0.02, 0.03};
  for (int k = 0; k < 3; k++) {
    g_amp = amps[k];
    int want = first_sufficient(noisy, 20, 300, 0.002);
    ASSERT(want >= 20 && want < 300);
    fake *f;
    km_timer_result r;
    ASSERT_EQ_INT(run_warm_default(&f, noisy, &r), KM_TIMER_OK);
    ASSERT_EQ_INT(r.stop, KM_STOP_NOISE);
    ASSERT_EQ_INT(r.n, want);
    for (int i = 0; i < r.n; i++) ASSERT_NEAR(r.samples[i], noisy(i), 0);
    /* statistics of exactly the counted samples */
    double s[MAXN];
    for (int i = 0; i < r.n; i++) s[i] = noisy(i);
    qsort(s, (size_t)r.n, sizeof(double), km_stats_cmp_double);
    ASSERT_NEAR(r.median, km_stats_quantile(s, r.n, 0.5), 0);
    ASSERT_NEAR(r.p25, km_stats_quantile(s, r.n, 0.25), 0);
    ASSERT_NEAR(r.p75, km_stats_quantile(s, r.n, 0.75), 0);
    ASSERT_NEAR(r.min, s[0], 0);
    ASSERT_NEAR(r.max, s[r.n - 1], 0);
    ASSERT_NEAR(r.rel_noise, km_stats_rel_noise(s, r.n), 1e-15);
    /* samples queued past the stop ran (and were waited for) but are not counted */
    ASSERT_EQ_INT(count(f, 'E'), r.n + r.n_extra);
    ASSERT_EQ_INT(f->sample_calls, r.n + r.n_extra);
    ASSERT(r.n_extra >= 0 && r.n_extra <= 2);
    ASSERT(f->gpu <= f->now); /* nothing left running */
    /* queued ahead: the GPU waited for the host once at most, a wake-up after sample
     * min_samples (nothing is queued past it before the rule has been asked) */
    ASSERT(f->idle <= f->wake_ms + 1e-9);
  }
}

TEST(a_stable_kernel_stops_at_min_samples_with_nothing_extra) {
  fake *f;
  km_timer_result r;
  ASSERT_EQ_INT(run_warm_default(&f, one_ms, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_NOISE);
  ASSERT_EQ_INT(r.n, 20);
  ASSERT_EQ_INT(r.n_extra, 0);
  ASSERT_NEAR(r.median, 1.0, 0);
  ASSERT_NEAR(r.mean, 1.0, 0);
  ASSERT_NEAR(r.total_ms, 20.1, 1e-9); /* back to back, and the host's wake-up after the last */
  ASSERT_NEAR(f->idle, 0, 0);          /* the GPU never waited for the host */
}

/* Serial work (an after hook that waits for its sample, as the judge's checks do) under an
 * early stop: samples enqueued one at a time, a quiet kernel stops at early_samples, and
 * nothing runs past the stop. */
TEST(serial_work_stops_early_with_nothing_extra) {
  fake *f = fresh(one_ms);
  f->host_ms = 0.001, f->wake_ms = 0.1;
  km_timing_protocol p = proto("cold", 1, 10, 300, 0.005);
  p.stop.early_samples = 5;
  km_timer_work w = {w_call, w_before, w_after, f, 0, 0, 1};
  km_timer_result r;
  ASSERT_EQ_INT(km_timer_run(&OPS, f, &p, &w, buf, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_NOISE);
  ASSERT_EQ_INT(r.n, 5);
  ASSERT_EQ_INT(r.n_extra, 0);
  ASSERT_EQ_INT(f->sample_calls, 5);
  /* not serial: the same rule queues ahead, and may run one past the stop */
  f = next_run(f, one_ms);
  f->host_ms = 0.001, f->wake_ms = 0.1;
  w.ud = f, w.serial = 0;
  ASSERT_EQ_INT(km_timer_run(&OPS, f, &p, &w, buf, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.n, 5);
  ASSERT_EQ_INT(f->sample_calls, r.n + r.n_extra);
}

TEST(max_samples_and_max_time) {
  g_amp = 0.3;
  fake *f = fresh(noisy);
  km_timing_protocol p = proto("warm", 1, 5, 50, 0.0001);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_MAX_SAMPLES);
  ASSERT_EQ_INT(r.n, 50);
  ASSERT_EQ_INT(r.n_extra, 0); /* never queued past max_samples */
  /* 10 ms samples, max_ms 35: the fourth ends at 40 ms, past it; nothing queued that would
   * finish after max_ms */
  f = fresh(ten_ms);
  p = proto("warm", 1, 20, 300, 0);
  p.stop.max_ms = 35;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_MAX_TIME);
  ASSERT_EQ_INT(r.n, 4);
  ASSERT_EQ_INT(r.n_extra, 0);
  ASSERT_NEAR(r.total_ms, 40, 0);
}

TEST(min_ms_holds_a_noise_stop) {
  fake *f = fresh(one_ms);
  km_timing_protocol p = proto("warm", 1, 20, 300, 0.002);
  p.stop.min_ms = 45;
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_NOISE);
  ASSERT_EQ_INT(r.n, 45);
  ASSERT(r.n_extra <= 2);
}

/* ==== queueing ahead ==== */

TEST(never_more_than_slots_minus_one_in_flight_and_no_slot_reused_early) {
  fake *f = fresh(tiny);
  f->host_ms = 0.0001; /* 0.2 ms of slack / 1 us samples: the lead wants hundreds */
  km_timing_protocol p = proto("warm", 1, 250, 250, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.n, 250);
  ASSERT_EQ_INT(r.n_extra, 0);
  ASSERT_EQ_INT(f->max_in_flight, KM_TIMER_SLOTS - 1);
  ASSERT_EQ_INT(f->slot_reused, 0);
}

TEST(the_first_plan_queues_two_then_paces_from_measured_times) {
  fake *f = fresh(one_ms);
  km_timing_protocol p = proto("warm", 1, 20, 300, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  /* after warm-up (2 calls, synced): two samples, then the first wait */
  const char *s = strstr(f->log, "YY");
  ASSERT(s != NULL);
  ASSERT(!strncmp(s + 2, "SCESCEW", 7));
}

/* ==== what a sample is, in order ==== */

TEST(hooks_flush_events_and_calls_in_order_cold) {
  fake *f = fresh(quarter_ms);
  km_timing_protocol p = proto("cold", 2, 4, 4, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 1, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.n, 4);
  ASSERT_EQ_INT(r.n_extra, 0);
  ASSERT_NEAR(r.median, 0.25, 0); /* per call: the sample / rep */
  ASSERT_EQ_INT(r.flush_bytes, 100 << 20);
  /* the log without waits: flush scratch, warm-up calls with their hooks (synced after the
   * last warm-up call and once more), then each sample: before, flush, start, rep calls, end,
   * after */
  char no_wait[LOGMAX];
  int k = 0;
  for (int i = 0; i < f->len; i++)
    if (f->log[i] != 'W') no_wait[k++] = f->log[i];
  no_wait[k] = 0;
  ASSERT_EQ_STR(no_wait, "PbwabwaYYBFSCCEABFSCCEABFSCCEABFSCCEA");
  ASSERT_EQ_INT(f->warm_calls, 2);
}

TEST(warm_mode_does_not_flush_and_warmup_lasts_warmup_ms) {
  fake *f = fresh(one_ms);
  km_timing_protocol p = proto("warm", 1, 3, 3, 0.002);
  p.warmup = 2;
  p.warmup_ms = 5; /* 1 ms calls: the 5th ends at 5 ms */
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(count(f, 'F') + count(f, 'P'), 0);
  ASSERT_EQ_INT(f->warm_calls, 5);
  ASSERT_EQ_INT(r.flush_bytes, 0);
}

TEST(graph_mode_captures_rep_calls_once_and_times_replays) {
  fake *f = fresh(quarter_ms);
  km_timing_protocol p = proto("graph", 3, 4, 4, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 1, 0, &r), KM_TIMER_OK);
  ASSERT(!strncmp(f->log, "Gcccg", 5)); /* no hook during the capture */
  ASSERT_EQ_INT(f->capture_calls, 3);
  ASSERT_EQ_INT(count(f, 'C') + count(f, 'w'), 0); /* after the capture, only replays */
  ASSERT_EQ_INT(f->replays, 2 + 4);                /* 2 warm-up, one per sample */
  ASSERT(strstr(f->log, "BSREA") != NULL);
  ASSERT_NEAR(r.median, 0.25, 0); /* a replay of 3 calls / 3 */
  /* a graph already: replayed as is, once a sample, whatever rep says */
  f = fresh(quarter_ms);
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 1, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(count(f, 'G'), 0);
  ASSERT_EQ_INT(f->sample_calls, 4);
  ASSERT_NEAR(r.median, 0.25, 0);
  /* ... and rep times a sample in the other modes */
  f = fresh(quarter_ms);
  p.mode = "warm";
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 1, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(f->sample_calls, 12);
  ASSERT_NEAR(r.median, 0.25, 0);
}

/* ==== failures ==== */

TEST(a_failing_call_or_hook_stops_timing_there) {
  fake *f = fresh(one_ms);
  f->fail_call = 5;
  km_timing_protocol p = proto("cold", 1, 20, 300, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS, &p, 1, 0, &r), KM_TIMER_EWORK);
  ASSERT_EQ_INT(count(f, 'B'), 5);
  ASSERT_EQ_INT(count(f, 'C'), 4);
  ASSERT_EQ_INT(f->log[f->len - 1], 'S'); /* nothing after the failed call */
  f = fresh(one_ms);
  f->fail_after = 2 + 7; /* 2 warm-up calls, then the 7th sample */
  ASSERT_EQ_INT(run(f, &OPS, &p, 1, 0, &r), KM_TIMER_EWORK);
  ASSERT_EQ_INT(count(f, 'A'), 7);
  ASSERT_EQ_INT(f->log[f->len - 1], 'A');
  f = fresh(one_ms);
  f->fail_before = 1; /* the first warm-up call's */
  ASSERT_EQ_INT(run(f, &OPS, &p, 1, 0, &r), KM_TIMER_EWORK);
  ASSERT_EQ_STR(f->log, "Pb");
  /* a call failing during the capture ends the capture without keeping it */
  f = fresh(one_ms);
  f->fail_call = -1;
  p.mode = "graph";
  ASSERT_EQ_INT(run(f, &OPS, &p, 1, 0, &r), KM_TIMER_EWORK);
  ASSERT_EQ_STR(f->log, "Gcx");
}

TEST(device_failures_say_what_was_being_done) {
  km_timing_protocol p = proto("cold", 1, 20, 300, 0.002);
  km_timer_result r;
  fake *f = fresh(one_ms);
  f->fail_record = 7;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EDEV);
  ASSERT_EQ_INT(r.err, 700);
  ASSERT_EQ_STR(r.what, "timing");
  f = fresh(one_ms);
  f->fail_sync = 1;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EDEV);
  ASSERT_EQ_INT(r.err, 999);
  ASSERT_EQ_STR(r.what, "warmup");
  f = fresh(one_ms);
  f->fail_flush_prepare = 1;
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EDEV);
  ASSERT_EQ_STR(r.what, "allocating the L2 flush buffer");
  f = fresh(one_ms);
  f->fail_flush_prepare = 2; /* the op may say better what failed */
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EDEV);
  ASSERT_EQ_STR(r.what, "loading the flush");
  f = fresh(one_ms);
  f->fail_capture_begin = 1;
  p.mode = "graph";
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EDEV);
  ASSERT_EQ_STR(r.what, "creating a capture stream");
  /* misuse */
  p = proto("warm", 0, 20, 300, 0.002);
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EINVAL);
  p = proto("warm", 1, 30, 20, 0.002);
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_EINVAL);
}

/* ==== clocks and energy ==== */

TEST(clocks_are_probed_around_the_samples_and_read_while_they_run) {
  fake *f = fresh(one_ms);
  f->clocks[0] = 1000, f->clocks[1] = 1100;
  f->energy_at = 0;
  km_timing_protocol p = proto("warm", 1, 40, 40, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS_EXTRAS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(f->sm_probes, 2);
  ASSERT_NEAR(r.sm_clock_start, 1000, 0);
  ASSERT_NEAR(r.sm_clock_end, 1100, 0);
  ASSERT_NEAR(r.sm_clock_min, 1000, 0);
  ASSERT_NEAR(r.sm_clock_max, 1100, 0);
  ASSERT_EQ_INT(r.clock_moved, 1);
  ASSERT_EQ_INT(f->clock_reads, 3); /* samples 0, 16, 32 */
  /* without the optional ops: nothing measured, and said so */
  f = fresh(one_ms);
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT(isnan(r.sm_clock_start) && isnan(r.sm_clock_max) && isnan(r.energy_j));
  ASSERT_EQ_INT(r.clock_moved, 0);
  ASSERT_EQ_STR(r.energy_why, "not measured (energy = false)");
}

/* The start probe rides with the first sample: read before any of its calls can run (before
 * the gate opens; before the calls are enqueued where there is no gate), and before the
 * sample's start event where there is no gate (the wait is not inside the window). With no
 * warm-up call of its own the run does not wait for the queue before it begins: the first
 * sample is enqueued behind whatever the GPU still runs. */
TEST(the_start_probe_is_read_before_the_first_sample_runs_and_nothing_drains_first) {
  for (int gated = 0; gated < 2; gated++) {
    fake *f = fresh(one_ms);
    f->clocks[0] = 1040, f->clocks[1] = 1045; /* and NVML's 1050 while samples run (OPS_EXTRAS) */
    f->gpu = 5; /* work enqueued before the run still running */
    km_timing_protocol p = proto("cold", 1, 10, 10, 0.002);
    p.warmup = 1, p.warmup_ms = 0;
    km_timer_work w = {w_call, w_before, w_after, f, 0, 1, 0};
    km_timer_result r;
    ASSERT_EQ_INT(km_timer_run(gated ? &OPS_GATE_PROBE : &OPS_EXTRAS, f, &p, &w, buf, &r), KM_TIMER_OK);
    ASSERT_EQ_INT(r.warmup_calls, 0);
    ASSERT_EQ_INT(count(f, 'Y'), 0); /* no drain */
    if (!gated) ASSERT_EQ_INT(f->start_read_calls, 0); /* gated: enqueued, held */
    ASSERT_EQ_INT(f->start_read_releases, 0);
    ASSERT_EQ_INT(f->waited_held, 0);
    ASSERT_EQ_INT(f->sm_probes, 2);
    ASSERT_NEAR(r.sm_clock_start, 1040, 0);
    ASSERT_NEAR(r.sm_clock_end, 1045, 0);
    ASSERT_EQ_INT(r.clock_moved, 0);
    /* ungated: the probe's read comes before the first start event; gated, before the release */
    const char *k = strchr(f->log, 'k'), *sev = strchr(f->log, 'S'), *rel = strchr(f->log, 'r');
    ASSERT(k && sev);
    if (gated) ASSERT(rel && k < rel);
    else ASSERT(k < sev);
    ASSERT(strchr(f->log, 'K') < sev); /* enqueued before the window */
    ASSERT(r.n == 10 && r.median > 0.99 && r.median < 1.01); /* the samples are the calls alone */
  }
}

/* The run's end on the host, after the last sample was enqueued: the samples read (the
 * wait for the last of them), the closing probe, all of it; each part within the whole. */
TEST(the_runs_end_on_the_host_is_reported_in_parts) {
  fake *f = fresh(one_ms);
  f->probe_ms = 0.05;
  km_timing_protocol p = proto("warm", 1, 10, 10, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS_EXTRAS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_NEAR(r.tail_probe_ms, 0.05, 1e-9);
  ASSERT(r.tail_read_ms >= 0);
  ASSERT(r.tail_ms >= r.tail_read_ms + r.tail_probe_ms - 1e-9);
  /* the last samples still ran when the last was enqueued: reading them waited for the GPU */
  ASSERT(r.tail_read_ms > 0.5);
  f = fresh(one_ms);
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_NEAR(r.tail_probe_ms, 0, 1e-9); /* no probe op: nothing spent */
}

TEST(an_energy_window_polls_while_waiting_and_holds_a_noise_stop) {
  /* not asked for: no window, no poll; each wait blocks on the sample's end event (a poll
   * is an NVML read that blocks the host ~3 ms: every wait answered the GPU that much later) */
  fake *f = fresh(one_ms);
  km_timing_protocol p = proto("warm", 1, 20, 300, 0.002);
  km_timer_result r;
  ASSERT_EQ_INT(run(f, &OPS_EXTRAS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.n, 20);
  ASSERT_EQ_INT(f->polls, 0);
  ASSERT_EQ_INT(f->pauses, 0);
  ASSERT(count(f, 'W') > 0);
  ASSERT(isnan(r.energy_j));
  ASSERT_EQ_STR(r.energy_why, "not measured (energy = false)");
  /* asked for, and the window long enough at once: polled while waiting, never blocked */
  f = fresh(one_ms);
  f->energy_at = 0;
  p.energy = 1;
  ASSERT_EQ_INT(run(f, &OPS_EXTRAS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.n, 20);
  ASSERT(f->polls > 0 && f->pauses > 0);
  ASSERT_EQ_INT(count(f, 'W'), 0); /* polled, never blocked */
  ASSERT_EQ_INT(f->poll_went_back, 0);
  ASSERT_NEAR(f->last_poll_calls, 20, 0);
  ASSERT_NEAR(r.energy_j, 0.5, 0);
  ASSERT(r.energy_why == NULL);
  /* without an energy counter: said so */
  f = fresh(one_ms);
  ASSERT_EQ_INT(run(f, &OPS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_STR(r.energy_why, "not measured (no energy counter)");
  /* asked for: the noise stop waits until the window is long enough */
  f = fresh(one_ms);
  f->energy_at = 60;
  p.energy = 1;
  ASSERT_EQ_INT(run(f, &OPS_EXTRAS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_NOISE);
  ASSERT(r.n >= 55 && r.n <= 62);
  /* max_samples still stops it */
  f = fresh(one_ms);
  f->energy_at = 1e9;
  p.stop.max_samples = 30;
  ASSERT_EQ_INT(run(f, &OPS_EXTRAS, &p, 0, 0, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.stop, KM_STOP_MAX_SAMPLES);
  ASSERT_EQ_INT(r.n, 30);
}

/* ==== the gate ==== */

static double three_quarter_ms(int i) { (void)i; return 0.75; }

/* A host slower than the GPU: each launch of three costs the host 0.5 ms, the call 0.75 ms
 * of GPU time. Without the gate the GPU waits for each launch inside the window; with it,
 * every sample is the work's own 0.75 ms, and the host's time shows as idle GPU outside. */
TEST(the_gate_keeps_a_slow_hosts_gaps_out_of_the_window) {
  km_timing_protocol p = proto("cold", 1, 10, 40, 0.002);
  for (int gated = 0; gated < 2; gated++) {
    fake *f = fresh(three_quarter_ms);
    f->host_ms = 0.5;
    km_timer_work w = {w_call_three, w_before, w_after, f, 0, 0, 0};
    km_timer_result r;
    ASSERT_EQ_INT(km_timer_run(gated ? &OPS_GATE : &OPS, f, &p, &w, buf, &r), KM_TIMER_OK);
    ASSERT_EQ_INT(r.gated, gated ? r.n + r.n_extra : 0);
    ASSERT_EQ_INT(r.gate_timeouts, 0);
    ASSERT(!f->waited_held && !f->held);
    if (gated) {
      ASSERT(r.min == 0.75 && r.max == 0.75); /* exactly the work's GPU time */
      ASSERT(r.gate_timeout_ms == 50 && f->gate_timeout_ms == 50); /* 4 x 1.5 ms is under the least */
      ASSERT_EQ_INT(f->gates, f->releases);
      ASSERT(f->idle > 0); /* the host's time, before the samples */
      /* per sample: before hook, flush, page check, gate, start, call, end, release, page
       * check, after hook; and the page checked at the run's start and end */
      ASSERT(strstr(f->log, "BF+gSCEr+A") != NULL);
      ASSERT(f->log[0] == '+' && f->log[f->len - 1] == '+');
      ASSERT_EQ_INT(f->checks, 2 + 2 * r.gated);
      ASSERT_EQ_INT(r.gate_tampered, 0);
      ASSERT(f->page.released == f->ticket && f->shadow.released == f->ticket);
    } else {
      ASSERT(r.min >= 0.75 + 0.5); /* two gaps inside every window: 0.5 ms of host, less 0.25 of GPU, each */
    }
  }
  /* the protocol says whether the gate is on */
  fake *f = fresh(three_quarter_ms);
  km_timer_work w = {w_call_three, NULL, NULL, f, 0, 0, 0};
  km_timer_result r;
  p.gate = 0;
  ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w, buf, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.gated, 0);
  ASSERT_EQ_INT(f->gates, 0);
}

/* A forward that takes the host 30 ms to launch: a gate waits 4 x that before opening by
 * itself, never more than 2 s. */
TEST(a_gates_timeout_follows_the_hosts_longest_warmup_call) {
  km_timing_protocol p = proto("cold", 1, 10, 20, 0.002);
  double host[] = {30, 1000};
  double want[] = {120, 2000};
  for (int k = 0; k < 2; k++) {
    fake *f = fresh(three_quarter_ms);
    f->host_ms = host[k]; /* the warm-up call is one launch here (w_call): host_ms each */
    km_timer_work w = {w_call_three, NULL, NULL, f, 0, 0, 0};
    km_timer_result r;
    ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w, buf, &r), KM_TIMER_OK);
    ASSERT(fabs(r.gate_timeout_ms - want[k]) < 1e-9 && fabs(f->gate_timeout_ms - want[k]) < 1e-9);
  }
}

/* A first warm-up call that sets up (500 ms of the host here) does not size the gate when
 * more calls follow; where it is the only warm-up call it does. */
TEST(a_first_warmup_calls_set_up_is_not_the_gates_measure) {
  double want[] = {120, 2000};
  for (int k = 0; k < 2; k++) {
    km_timing_protocol p = proto("cold", 1, 10, 20, 0.002);
    p.warmup = k == 0 ? 3 : 1, p.warmup_ms = 0;
    fake *f = fresh(three_quarter_ms);
    f->host_ms = 30, f->first_warm_ms = 500;
    km_timer_work w = {w_call_three, NULL, NULL, f, 0, 0, 0};
    km_timer_result r;
    ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w, buf, &r), KM_TIMER_OK);
    ASSERT_EQ_INT(f->warm_calls, p.warmup);
    ASSERT(fabs(r.gate_timeout_ms - want[k]) < 1e-9);
  }
}

/* Calls the caller made just before (warmed) count toward the protocol's warm-up calls: with
 * warmup = 1 and one such call the run makes none of its own, with warmup = 3 two; the
 * protocol's key does not change (the same protocol, the same cached timings), and with no
 * warm-up call of its own the gate's timeout is the least one. */
TEST(calls_made_before_count_toward_the_warmup) {
  int warmups[] = {1, 3, 1}, warmed[] = {1, 1, 0}, want[] = {0, 2, 1};
  for (int k = 0; k < 3; k++) {
    km_timing_protocol p = proto("cold", 1, 10, 20, 0.002);
    p.warmup = warmups[k], p.warmup_ms = 0;
    char key_before[512], key_after[512];
    km_timing_protocol_key(&p, key_before, sizeof key_before);
    fake *f = fresh(three_quarter_ms);
    f->host_ms = 30;
    km_timer_work w = {w_call_three, NULL, NULL, f, 0, warmed[k], 0};
    km_timer_result r;
    ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w, buf, &r), KM_TIMER_OK);
    ASSERT_EQ_INT(f->warm_calls, want[k]);
    ASSERT_EQ_INT(r.warmup_calls, want[k]);
    ASSERT(r.n >= 10);
    km_timing_protocol_key(&p, key_after, sizeof key_after);
    ASSERT_EQ_STR(key_before, key_after);
    if (want[k] == 0) ASSERT(fabs(r.gate_timeout_ms - 50) < 1e-9);
    else ASSERT(fabs(r.gate_timeout_ms - 120) < 1e-9);
  }
}

/* A gate that opens by its timeout (the work waited for the GPU while the gate held it):
 * the run goes on without gates and says so. A failing call still opens its gate. */
TEST(a_gate_timeout_stops_gating_and_a_failure_still_releases) {
  km_timing_protocol p = proto("cold", 1, 20, 40, 0.002);
  fake *f = fresh(three_quarter_ms);
  f->timeout_after = 3;
  km_timer_work w = {w_call_three, NULL, NULL, f, 0, 0, 0};
  km_timer_result r;
  ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w, buf, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.gate_timeouts, 1);
  ASSERT(r.gated >= 3 && r.gated < r.n + r.n_extra);
  ASSERT_EQ_INT(f->gates, r.gated);
  ASSERT(!f->held);
  /* the device counted it while a gate was waiting: no tampering, and the shadow follows */
  ASSERT_EQ_INT(r.gate_tampered, 0);
  ASSERT(f->shadow.timeouts == 1 && f->shadow.tampered == 0);
  f = fresh(three_quarter_ms);
  f->fail_call = 2;
  km_timer_work w2 = {w_call, NULL, NULL, f, 0, 0, 0};
  ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w2, buf, &r), KM_TIMER_EWORK);
  ASSERT(!f->held);
  ASSERT_EQ_INT(f->gates, f->releases);
}

/* ==== the gate's page, written by the work ====
 * A kernel that learned the page's address (a dry run's printf) can write it: `released`
 * opens every later gate at once, `timeouts` hides or fakes a timeout. Each sample here is
 * 0.75 ms of GPU work launched in three parts by a host that takes 0.5 ms per launch: gated,
 * every sample is exactly 0.75 ms; with its gate open early it holds two host gaps. */

static km_timing_protocol gate_proto(void) { return proto("cold", 1, 10, 10, 0.002); } /* 10 samples */

static int run_slow_host(fake *f, const km_timer_ops *ops, km_timer_result *r) {
  km_timing_protocol p = gate_proto();
  f->host_ms = 0.5;
  km_timer_work w = {w_call_three, w_before, w_after, f, 0, 0, 0};
  return km_timer_run(ops, f, &p, &w, buf, r);
}

/* The hole the check closes: a page written before a run (by an earlier candidate) opens every
 * gate of it at once, and the host's gaps are inside every sample (a baseline so timed is slow,
 * and a speedup over it large). Checked, the run finds it at its start, before any gate, puts
 * the page back and fails; the next run is gated as if nothing had happened. */
TEST(a_page_written_before_a_run_opens_its_gates_unless_checked) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->page.released = HUGE_TICKET;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE_UNCHECKED, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(f->opened_at_once, r.gated);
  ASSERT(r.min >= 0.75 + 0.5); /* every window holds the host's gaps */

  f = fresh(three_quarter_ms);
  f->page.released = HUGE_TICKET;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_INT(r.gate_tampered, 1);
  ASSERT_EQ_INT(r.gate_tamper_what, KM_GATE_RELEASED);
  ASSERT_EQ_STR(r.what, "the start of the run");
  ASSERT_EQ_STR(km_gate_what(r.gate_tamper_what), "released written");
  ASSERT_EQ_INT(f->gates, 0);
  ASSERT_EQ_INT(f->warm_calls, 0); /* nothing of the work ran */
  ASSERT(f->page.released == 0 && f->shadow.tampered == 1); /* put back: what the host last wrote */

  f = next_run(f, three_quarter_ms);
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_OK);
  ASSERT(r.min == 0.75 && r.max == 0.75);
  ASSERT_EQ_INT(f->opened_at_once, 0);
  ASSERT(f->shadow.tampered == 1);
}

/* Written by the sample's own call, between its gate and its release: the release finds the
 * page not holding what the host wrote (and notes it before writing over it), the check after
 * it reports it, and the run stops there. The page holds what the host wrote last. */
TEST(a_write_during_a_sample_is_found_at_its_release_and_voids_the_run) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->tamper_call = 4, f->tamper_how = OPEN;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_STR(r.what, "a release");
  ASSERT_EQ_INT(r.gate_tampered, 1);
  ASSERT_EQ_INT(r.gate_tamper_what, KM_GATE_RELEASED);
  ASSERT_EQ_INT(f->gates, 4);
  ASSERT_EQ_INT(count(f, 'A'), 3); /* the fourth sample's after hook never ran */
  ASSERT(!f->held);
  ASSERT(f->page.released == 4 && f->shadow.released == 4);
  ASSERT(strstr(f->log, "CTEr!") != NULL);
}

/* Written between samples (here by a before hook; on the GPU, by a call of an earlier sample
 * that ran late): found by the check before the next gate, which is never enqueued. */
TEST(a_write_between_samples_is_found_before_the_next_gate) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->tamper_before = 6, f->tamper_how = OPEN;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_STR(r.what, "a gate");
  ASSERT_EQ_INT(f->gates, 5);
  ASSERT(f->page.released == 5 && !f->held);
  ASSERT(strstr(f->log, "BTF!") != NULL);
}

/* Written after the last sample's release (its after hook, or a late kernel): found at the
 * end of the run, before its numbers are handed out, so no later run's gates open early. */
TEST(a_write_after_the_last_release_is_found_at_the_end) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->tamper_after = 10, f->tamper_how = OPEN;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_STR(r.what, "the end of the run");
  ASSERT_EQ_INT(f->gates, 10);
  ASSERT(f->page.released == 10 && f->shadow.tampered == 1);
  ASSERT_EQ_INT(f->log[f->len - 1], '!');
}

/* timeouts: the device only counts up, and only while a gate waits. Lowered (hiding a real
 * timeout), or raised between runs (faking one): tampering. Raised while a gate waits: cannot
 * be told from the device's own count; it stops gating for the rest of that run and says so
 * (gate_timeouts), which only lets host gaps into that run's own samples. */
TEST(timeouts_lowered_or_raised_outside_a_gate_are_tampering) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->page.timeouts = f->shadow.timeouts = 5; /* five real timeouts in earlier runs */
  f->tamper_call = 3, f->tamper_how = LOWER_TIMEOUTS;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_STR(r.what, "a release");
  ASSERT_EQ_INT(r.gate_tamper_what, KM_GATE_TIMEOUTS);
  ASSERT_EQ_STR(km_gate_what(r.gate_tamper_what), "timeouts written");
  ASSERT(f->page.timeouts == 5 && f->shadow.timeouts == 5);

  f = next_run(f, three_quarter_ms);
  f->page.timeouts++; /* between runs: no gate is waiting */
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_STR(r.what, "the start of the run");
  ASSERT_EQ_INT(r.gate_tamper_what, KM_GATE_TIMEOUTS);
  ASSERT(f->page.timeouts == 5);

  f = next_run(f, three_quarter_ms);
  f->page.timeouts = 0, f->page.released = HUGE_TICKET; /* both */
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_ETAMPERED);
  ASSERT_EQ_INT(r.gate_tamper_what, KM_GATE_RELEASED | KM_GATE_TIMEOUTS);
  ASSERT_EQ_STR(km_gate_what(r.gate_tamper_what), "released and timeouts written");
  ASSERT(f->page.timeouts == 5 && f->page.released == f->shadow.released);
  ASSERT(f->shadow.tampered == 3);

  f = next_run(f, three_quarter_ms);
  f->tamper_call = 3, f->tamper_how = RAISE_TIMEOUTS; /* while a gate waits */
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.gate_timeouts, 1);
  ASSERT(r.gated < r.n + r.n_extra);
  ASSERT(f->shadow.timeouts == 6 && f->shadow.tampered == 3);
}

/* What the check cannot see: a write that the same kernel undoes before it ends. No gate
 * can run in between (a gate runs on the stream after the kernel), so none opens early: the
 * run is gated throughout and exact. */
TEST(a_write_undone_by_the_same_kernel_is_not_seen_and_opens_nothing) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->tamper_call = 4, f->tamper_how = OPEN_UNDONE;
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(r.gate_tampered, 0);
  ASSERT_EQ_INT(f->opened_at_once, 0);
  ASSERT(r.min == 0.75 && r.max == 0.75);
  ASSERT(f->shadow.tampered == 0);
}

/* A failing run (EWORK, EDEV) leaves its page as it found it: the next run's start check is
 * clean; one that fails by tampering leaves it put back. */
TEST(a_run_left_by_a_failure_leaves_the_page_clean) {
  km_timer_result r;
  fake *f = fresh(three_quarter_ms);
  f->fail_call = 4;
  km_timing_protocol p = gate_proto();
  km_timer_work w = {w_call, NULL, NULL, f, 0, 0, 0};
  ASSERT_EQ_INT(km_timer_run(&OPS_GATE, f, &p, &w, buf, &r), KM_TIMER_EWORK);
  ASSERT_EQ_INT(r.gate_tampered, 0);
  f = next_run(f, three_quarter_ms);
  ASSERT_EQ_INT(run_slow_host(f, &OPS_GATE, &r), KM_TIMER_OK);
  ASSERT_EQ_INT(f->log[0], '+');
}

int main(void) {
  RUN(stops_at_the_first_sufficient_count);
  RUN(a_stable_kernel_stops_at_min_samples_with_nothing_extra);
  RUN(serial_work_stops_early_with_nothing_extra);
  RUN(max_samples_and_max_time);
  RUN(min_ms_holds_a_noise_stop);
  RUN(never_more_than_slots_minus_one_in_flight_and_no_slot_reused_early);
  RUN(the_first_plan_queues_two_then_paces_from_measured_times);
  RUN(hooks_flush_events_and_calls_in_order_cold);
  RUN(warm_mode_does_not_flush_and_warmup_lasts_warmup_ms);
  RUN(graph_mode_captures_rep_calls_once_and_times_replays);
  RUN(a_failing_call_or_hook_stops_timing_there);
  RUN(device_failures_say_what_was_being_done);
  RUN(clocks_are_probed_around_the_samples_and_read_while_they_run);
  RUN(an_energy_window_polls_while_waiting_and_holds_a_noise_stop);
  RUN(the_gate_keeps_a_slow_hosts_gaps_out_of_the_window);
  RUN(a_gate_timeout_stops_gating_and_a_failure_still_releases);
  RUN(a_gates_timeout_follows_the_hosts_longest_warmup_call);
  RUN(a_first_warmup_calls_set_up_is_not_the_gates_measure);
  RUN(calls_made_before_count_toward_the_warmup);
  RUN(the_start_probe_is_read_before_the_first_sample_runs_and_nothing_drains_first);
  RUN(the_runs_end_on_the_host_is_reported_in_parts);
  RUN(a_page_written_before_a_run_opens_its_gates_unless_checked);
  RUN(a_write_during_a_sample_is_found_at_its_release_and_voids_the_run);
  RUN(a_write_between_samples_is_found_before_the_next_gate);
  RUN(a_write_after_the_last_release_is_found_at_the_end);
  RUN(timeouts_lowered_or_raised_outside_a_gate_are_tampering);
  RUN(a_write_undone_by_the_same_kernel_is_not_seen_and_opens_nothing);
  RUN(a_run_left_by_a_failure_leaves_the_page_clean);
  return DONE();
}
