/* km_sampling_core.h — when timing stops, how far it queues ahead, and the name of the
 * protocol it follows (pure C: no lua_State, no driver; the timing loop, km_timer_core.c,
 * asks it, for km.timing and the C API's km_time alike).
 *
 * Ownership: a km_sampler works in two arrays of rule.max_samples doubles that its caller
 * owns and keeps alive while the sampler is used; nothing here allocates.
 *
 * The stop rule is nvbench's noise criterion applied to the median: sampling stops at the
 * first sample count n with n >= min_samples, the samples' summed time >= min_ms and the
 * median's relative standard error (the rule's noise statistic, km_stop_noise) <= max_noise;
 * or at max_samples; or
 * once max_ms of wall time have passed and at least min(min_samples, 3) samples are in.
 * With early_samples (e) below min_samples (m), it stops sooner where the answer is settled:
 * at the first n in e..m-1 whose noise is <= max_noise * n / m (at n = 5 of m = 10, half the
 * target). With max_ci > 0, a noise stop (early or not) also needs the median's
 * distribution-free interval of at least 90% coverage (two order statistics:
 * km_stats_median_ci) to lie within +-max_ci of the median: at 5 samples that is all five
 * within 2 x max_ci, and it takes no estimate of the spread, so a few samples that happen to
 * agree (the IQR of 5 to 9 samples is small by chance far more often than the spread is) do
 * not stop a noisy timing (tests/lua/test_stop_rule.lua simulates it).
 *
 * The noise statistic: KM_NOISE_IQR (km_stats_rel_noise, from the interquartile range: the
 * default, nvbench's) or KM_NOISE_GINI (km_stats_gini_noise: from the trimmed Gini mean
 * difference, inflated by 1 + 1/sqrt(n) so an estimate small by chance seldom stops a
 * timing). The judge's rule is the latter from 5 samples, with neither the early stop nor
 * the interval (km.judge.checks says why, and what it costs). */
#ifndef KM_SAMPLING_CORE_H
#define KM_SAMPLING_CORE_H

#include <stddef.h>

/* Bumped whenever a change could move a timing: results of different versions are not
 * comparable. 1: fixed batches of 16, double-buffered (48 samples at least). 2: the stop
 * rule evaluated at every sample, adaptive queueing ahead. 3: the gate (each sample's work held
 * on the GPU until the host has enqueued all of it; `gate` in the key). */
#define KM_TIMING_PROTOCOL_VERSION 3

/* A second noise test (the rule's `alt`): a noise stop also comes where this one holds at n
 * samples, by its own statistic, least count, early stop and interval, as km_stop_rule's
 * own fields read (max_noise, min_samples, early_samples, max_ci, noise_stat), never before
 * the rule's own first stop count (its early_samples, else min_samples: a caller's least count
 * holds for both tests), and only where the median is at least min_median_ms. The judge's
 * gini rule takes the interval rule as its alt: the gini statistic reads every pair of the
 * middle samples, and a kernel whose calls keep a tight core with a minority of late ones
 * (softmax and layernorm at 200 us: 40 to 180 calls) is settled by the interquartile range
 * at 10 (tests/lua/test_stop_rule.lua simulates both). */
typedef struct km_stop_alt {
  int on;                       /* 0: none */
  int min_samples, early_samples;
  double max_noise, max_ci;
  int noise_stat;
  double min_median_ms;         /* it stops nothing while the median is below this; 0: any median */
} km_stop_alt;

typedef struct km_stop_rule {
  int min_samples, max_samples; /* 20, 300 */
  double max_noise;             /* relative standard error of the median; 0.002 */
  double min_ms;                /* summed sample time a noise stop needs; 0 */
  double max_ms;                /* wall time after which sampling stops; 2000 */
  int early_samples;            /* an earlier noise stop from here, at a tighter target; 0: none */
  double max_ci;                /* a noise stop also needs the median's order-statistic interval
                                   (km_stats_median_ci) within +-max_ci of it; 0: not asked */
  int noise_stat;               /* the statistic max_noise bounds: KM_NOISE_IQR, KM_NOISE_GINI */
  km_stop_alt alt;              /* a second noise test either of which stops (above); alt.on 0: none */
} km_stop_rule;

enum { KM_NOISE_IQR = 0, KM_NOISE_GINI = 1 };
/* "iqr", "gini", or NULL for another value. */
const char *km_noise_name(int stat);
/* The statistic of that name, or -1. */
int km_noise_stat(const char *name);
/* The noise the rule reads at n sorted samples: km_stats_rel_noise or km_stats_gini_noise. */
double km_stop_noise(const km_stop_rule *r, const double *sorted, int n);

typedef enum { KM_SAMPLE_ON = 0, KM_STOP_NOISE, KM_STOP_MAX_SAMPLES, KM_STOP_MAX_TIME } km_stop;

/* The defaults above. */
void km_stop_rule_default(km_stop_rule *r);
/* 0 when the rule can be used (1 <= min_samples <= max_samples, max_noise >= 0,
 * min_ms >= 0, max_ms > 0, 0 <= early_samples <= min_samples, max_ci >= 0, a known
 * noise_stat), else -1. */
int km_stop_rule_valid(const km_stop_rule *r);
/* The noise a stop at n samples needs (max_noise, or the early stop's tighter bound), or -1
 * where no noise stop can come at n. */
double km_stop_target(const km_stop_rule *r, int n);
/* "noise", "max_samples", "max_time", or NULL for KM_SAMPLE_ON. */
const char *km_stop_name(km_stop s);

typedef struct km_sampler {
  km_stop_rule rule;
  double *samples; /* in the order taken */
  double *sorted;  /* the same, ascending */
  int n;
  double sum_ms, noise; /* noise: the rule's statistic after the last add (infinity below 3) */
  km_stop stop;
} km_sampler;

void km_sampler_init(km_sampler *s, const km_stop_rule *r, double *samples, double *sorted);
/* Adds one sample (ms) whose completion was seen elapsed_ms after sampling began and applies
 * the rule. hold != 0 keeps a noise stop back (km.timing's energy window is still too short);
 * the other stops still apply. Returns the decision, also kept in s->stop; once stopped, a
 * further add changes nothing and returns the same stop. */
km_stop km_sampler_add(km_sampler *s, double ms, double elapsed_ms, int hold);

/* Pacing: what the binding has measured so far. */
typedef struct km_pace {
  double sample_ms;  /* GPU time per sample, flush and hook work included; <= 0: not known */
  double host_ms;    /* host time to enqueue one sample */
  double slack_ms;   /* host wake-up latency (and blocking reads) to cover */
  double elapsed_ms; /* since sampling began */
  int hold;          /* as for km_sampler_add */
  int max_lead;      /* the most samples the binding can have in flight */
  int serial;        /* each sample is waited for as it is enqueued (the work's after hook
                        waits): nothing is gained by queueing ahead, so none is queued */
} km_pace;

#define KM_FIRST_LEAD 2 /* samples queued before any has been measured */

/* How many samples should have been queued in all, given `queued` so far (never less than
 * `queued`). Enough ahead of the last sample taken that the GPU does not wait for the host
 * (1 + (host_ms + slack_ms) / sample_ms, at least 2; 1 for serial work), but never more than
 * the rule may need: min_samples (early_samples, where set) before the rule has been asked;
 * between early_samples and min_samples one more (the rule may stop at any of them); then the
 * count at which the noise, falling as 1/sqrt(n), is predicted to meet max_noise (or min_ms
 * to be reached); past the first ask, plus one so the GPU has work while the host decides
 * (none for serial work); none that would finish after max_ms; never above max_samples. A
 * stopped sampler needs nothing more. */
int km_sampler_plan(const km_sampler *s, int queued, const km_pace *p);

/* ---- the protocol: everything that decides how a time is taken ---- */

/* The timing modes by name, in the order of include/kmrun.h's km_time_mode: the one list
 * km.timing (timing.modes), the C API (km_time) and km.ffi read. */
#define KM_TIMING_NMODES 3
extern const char *const km_timing_modes[KM_TIMING_NMODES];
/* The list's own string for a mode's name (static: the caller may keep it), or NULL. */
const char *km_timing_mode(const char *name);

typedef struct km_timing_protocol {
  const char *mode;   /* one of km_timing_modes */
  int rep;            /* calls of the timed function per sample */
  int warmup;         /* warm-up calls, at least */
  double warmup_ms;   /* and at least this long */
  long long flush_bytes; /* cold mode's L2 flush; 0: twice the device's L2 */
  int energy;         /* sampling held on until an energy window is long enough */
  int gate;           /* each sample's work waits on the GPU until the host has enqueued it all */
  km_stop_rule stop;
} km_timing_protocol;

/* The defaults both bindings start from: cold, rep 1, warm-up 3 calls and 5 ms, flush twice
 * the L2, no energy window, the gate on, km_stop_rule_default. */
void km_timing_protocol_default(km_timing_protocol *p);

/* Writes the protocol's key, a string naming every field that decides a timing (numbers in
 * their shortest exact form), e.g. "km.timing/3 mode=cold rep=1 warmup=3,1ms
 * stop=noise<=0.002,n=20..300,min_ms=0,max_ms=2000 flush=2xL2 energy=0 gate=1"; an early
 * stop adds ",early=E" after the sample counts, an interval ",ci<=C" (a rule without them
 * keeps its key), and the Gini statistic names itself: "stop=gini<=0.0021,...". Returns
 * the length it needs, as snprintf does (-1 on a NULL protocol). */
int km_timing_protocol_key(const km_timing_protocol *p, char *buf, size_t cap);

#endif
