/* test_sampling.c — the timing stop rule, the pacing of queued samples and the protocol key
 * (km_sampling_core.c). */
#include <math.h>
#include <stdlib.h>
#include "test.h"
#include "km_sampling_core.h"
#include "km_stats_core.h"

#define MAXN 400

/* A deterministic noisy series: 1 ms plus a pseudo-random spread of +-amp. */
static double series(int i, double amp) {
  unsigned x = (unsigned)i * 2654435761u + 12345u;
  x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
  return 1.0 + amp * ((double)(x % 10001) / 5000.0 - 1.0);
}

/* The first n >= min_samples at which the noise of the first n samples is <= target,
 * computed the slow way (sort every prefix), independently of the sampler. */
static int first_sufficient(double amp, int min_n, int max_n, double target) {
  double buf[MAXN];
  for (int n = 1; n <= max_n; n++) {
    for (int i = 0; i < n; i++) buf[i] = series(i, amp);
    qsort(buf, (size_t)n, sizeof(double), km_stats_cmp_double);
    if (n >= min_n && km_stats_rel_noise(buf, n) <= target) return n;
  }
  return -1;
}

static km_stop_rule rule(int min_n, int max_n, double noise, double min_ms, double max_ms) {
  km_stop_rule r = {min_n, max_n, noise, min_ms, max_ms, 0, 0, KM_NOISE_IQR, {0, 0, 0, 0, 0, 0, 0}};
  return r;
}

TEST(defaults_and_validation) {
  km_stop_rule r;
  km_stop_rule_default(&r);
  ASSERT_EQ_INT(r.min_samples, 20);
  ASSERT_EQ_INT(r.max_samples, 300);
  ASSERT_NEAR(r.max_noise, 0.002, 0);
  ASSERT_NEAR(r.min_ms, 0, 0);
  ASSERT_NEAR(r.max_ms, 2000, 0);
  ASSERT_EQ_INT(r.noise_stat, KM_NOISE_IQR);
  ASSERT_EQ_INT(km_stop_rule_valid(&r), 0);
  km_stop_rule bad = rule(0, 10, 0.01, 0, 10);
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad = rule(10, 9, 0.01, 0, 10);
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad = rule(1, 9, NAN, 0, 10);
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad = rule(1, 9, 0.01, -1, 10);
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad = rule(1, 9, 0.01, 0, 0);
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  ASSERT_EQ_STR(km_stop_name(KM_STOP_NOISE), "noise");
  ASSERT_EQ_STR(km_stop_name(KM_STOP_MAX_SAMPLES), "max_samples");
  ASSERT_EQ_STR(km_stop_name(KM_STOP_MAX_TIME), "max_time");
  ASSERT(km_stop_name(KM_SAMPLE_ON) == NULL);
}

/* The rule stops at exactly the first sufficient count, for several noise levels, and
 * keeps sorted order and the sum as it goes. */
TEST(stops_at_the_first_sufficient_count) {
  double amps[] = {0.0005, 0.01, 0.02, 0.03};
  for (int k = 0; k < 4; k++) {
    int want = first_sufficient(amps[k], 20, 300, 0.002);
    ASSERT(want >= 20);
    double a[MAXN], b[MAXN];
    km_stop_rule r = rule(20, 300, 0.002, 0, 1e9);
    km_sampler s;
    km_sampler_init(&s, &r, a, b);
    int n = 0;
    km_stop st = KM_SAMPLE_ON;
    while (st == KM_SAMPLE_ON) {
      st = km_sampler_add(&s, series(n, amps[k]), 0, 0);
      n++;
    }
    ASSERT_EQ_INT(st, KM_STOP_NOISE);
    ASSERT_EQ_INT(s.n, want);
    ASSERT_EQ_INT(n, want);
    for (int i = 1; i < s.n; i++) ASSERT(s.sorted[i - 1] <= s.sorted[i]);
    double sum = 0;
    for (int i = 0; i < s.n; i++) sum += s.samples[i];
    ASSERT_NEAR(s.sum_ms, sum, 1e-9);
    ASSERT(s.noise <= 0.002);
    /* a later add is refused: n stays where the rule stopped */
    ASSERT_EQ_INT(km_sampler_add(&s, 5.0, 0, 0), KM_STOP_NOISE);
    ASSERT_EQ_INT(s.n, want);
  }
  /* the noisiest series needs more than min_samples, the quietest exactly min_samples */
  ASSERT_EQ_INT(first_sufficient(0.0005, 20, 300, 0.002), 20);
  ASSERT(first_sufficient(0.03, 20, 300, 0.002) > 20);
}

/* What the profile saw: a stable kernel stops at min_samples (20), not at a batching floor of 48. */
TEST(a_stable_kernel_stops_at_min_samples) {
  double a[MAXN], b[MAXN];
  km_stop_rule r;
  km_stop_rule_default(&r);
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 19; i++) ASSERT_EQ_INT(km_sampler_add(&s, 1.0 + 1e-5 * (i % 3), 1, 0), KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_add(&s, 1.0, 1, 0), KM_STOP_NOISE);
  ASSERT_EQ_INT(s.n, 20);
}

TEST(min_time_holds_a_noise_stop) {
  double a[MAXN], b[MAXN];
  km_stop_rule r = rule(5, 300, 0.01, 10.0, 1e9); /* 10 ms of samples of 1 ms */
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 9; i++) ASSERT_EQ_INT(km_sampler_add(&s, 1.0, 0, 0), KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_add(&s, 1.0, 0, 0), KM_STOP_NOISE);
  ASSERT_EQ_INT(s.n, 10);
}

TEST(max_samples_max_time_and_hold) {
  double a[MAXN], b[MAXN];
  /* noise never met: max_samples */
  km_stop_rule r = rule(3, 30, 0.0, 0, 1e9);
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  int n = 0;
  while (km_sampler_add(&s, series(n, 0.05), 0, 0) == KM_SAMPLE_ON) n++;
  ASSERT_EQ_INT(s.stop, KM_STOP_MAX_SAMPLES);
  ASSERT_EQ_INT(s.n, 30);
  /* past max_ms: stops once 3 samples are in, not before */
  r = rule(20, 300, 0.0, 0, 100);
  km_sampler_init(&s, &r, a, b);
  ASSERT_EQ_INT(km_sampler_add(&s, 1, 150, 0), KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_add(&s, 1, 150, 0), KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_add(&s, 1, 150, 0), KM_STOP_MAX_TIME);
  /* ... or once min_samples are in, when that is fewer */
  r = rule(1, 300, 0.0, 0, 100);
  km_sampler_init(&s, &r, a, b);
  ASSERT_EQ_INT(km_sampler_add(&s, 1, 150, 0), KM_STOP_MAX_TIME);
  /* hold: a met noise target does not stop, max_samples still does */
  r = rule(2, 8, 0.5, 0, 1e9);
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 7; i++) ASSERT_EQ_INT(km_sampler_add(&s, 1.0, 0, 1), KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_add(&s, 1.0, 0, 1), KM_STOP_MAX_SAMPLES);
  /* released, the same samples stop on noise */
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 2; i++) km_sampler_add(&s, 1.0, 0, 0);
  ASSERT_EQ_INT(km_sampler_add(&s, 1.0, 0, 0), KM_STOP_NOISE);
  ASSERT_EQ_INT(s.n, 3);
}

static km_pace pace(double sample_ms, double host_ms, double elapsed_ms) {
  km_pace p = {sample_ms, host_ms, 0.2, elapsed_ms, 0, 63, 0};
  return p;
}

TEST(plan_queues_little_first_then_from_the_measured_time) {
  double a[MAXN], b[MAXN];
  km_stop_rule r;
  km_stop_rule_default(&r);
  r.min_samples = 100; /* the rule is not asked before 100: only the lead limits */
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  km_pace p = pace(0, 0, 0);
  ASSERT_EQ_INT(km_sampler_plan(&s, 0, &p), KM_FIRST_LEAD); /* nothing measured yet */
  ASSERT_EQ_INT(km_sampler_plan(&s, 5, &p), 5);            /* never less than queued */
  km_sampler_add(&s, 1.0, 1, 0);
  /* 1 ms samples, 0.05 ms to enqueue one: 1 + ceil(0.25 / 1) = 2 ahead of the one taken */
  p = pace(1.0, 0.05, 1);
  ASSERT_EQ_INT(km_sampler_plan(&s, 2, &p), 3);
  /* 10 us samples: 1 + ceil(0.25 / 0.01) = 26 ahead */
  p = pace(0.01, 0.05, 1);
  ASSERT_EQ_INT(km_sampler_plan(&s, 2, &p), 1 + 26);
  /* never more than the binding can hold in flight */
  p = pace(0.001, 0.05, 1);
  p.max_lead = 8;
  ASSERT_EQ_INT(km_sampler_plan(&s, 2, &p), 1 + 8);
}

TEST(plan_never_queues_past_what_the_rule_may_need) {
  double a[MAXN], b[MAXN];
  km_stop_rule r;
  km_stop_rule_default(&r);
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  km_pace p = pace(0.001, 0.05, 0); /* would want 63 ahead */
  for (int i = 0; i < 15; i++) km_sampler_add(&s, series(i, 0.015), 0, 0);
  ASSERT_EQ_INT(km_sampler_plan(&s, 15, &p), 20); /* before the rule is asked: min_samples */
  for (int i = 15; i < 20; i++) km_sampler_add(&s, series(i, 0.015), 0, 0);
  ASSERT_EQ_INT(s.stop, KM_SAMPLE_ON);
  /* asked: the predicted count from noise ~ 1/sqrt(n) */
  double ratio = s.noise / r.max_noise;
  int predicted = (int)ceil(20 * ratio * ratio);
  ASSERT(predicted > 22 && predicted < 20 + 63);
  ASSERT_EQ_INT(km_sampler_plan(&s, 20, &p), predicted);
  /* the prediction never leaves the GPU without one sample behind the one taken */
  km_stop_rule r2 = rule(20, 300, 0.002, 0, 1e9);
  km_sampler_init(&s, &r2, a, b);
  for (int i = 0; i < 20; i++) km_sampler_add(&s, series(i, 0.0025), 0, 0);
  if (s.stop == KM_SAMPLE_ON) ASSERT(km_sampler_plan(&s, 20, &p) >= 22);
  /* max_samples caps everything */
  km_stop_rule r3 = rule(2, 10, 0.0, 0, 1e9);
  km_sampler_init(&s, &r3, a, b);
  for (int i = 0; i < 4; i++) km_sampler_add(&s, series(i, 0.05), 0, 0);
  ASSERT_EQ_INT(km_sampler_plan(&s, 4, &p), 10);
  /* none that would finish after max_ms: 100 ms left of 30 ms samples -> 1 + 3 more */
  km_stop_rule r4 = rule(20, 300, 0.002, 0, 200);
  km_sampler_init(&s, &r4, a, b);
  km_sampler_add(&s, 30, 100, 0);
  p = pace(30, 0.05, 100);
  p.slack_ms = 200; /* would want 8 ahead */
  ASSERT_EQ_INT(km_sampler_plan(&s, 1, &p), 1 + 1 + 3);
  /* a stopped sampler needs nothing more */
  km_stop_rule r5 = rule(1, 300, 1.0, 0, 1e9);
  km_sampler_init(&s, &r5, a, b);
  km_sampler_add(&s, 1, 0, 0);
  km_sampler_add(&s, 1, 0, 0);
  km_sampler_add(&s, 1, 0, 0);
  ASSERT_EQ_INT(s.stop, KM_STOP_NOISE);
  ASSERT_EQ_INT(km_sampler_plan(&s, 3, &p), 3);
}

TEST(plan_with_min_time_and_hold) {
  double a[MAXN], b[MAXN];
  km_stop_rule r = rule(5, 300, 0.01, 50.0, 1e9); /* 50 ms of 1 ms samples */
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  km_pace p = pace(1.0, 0.05, 0);
  p.max_lead = 63;
  p.slack_ms = 100; /* wants 63 ahead */
  for (int i = 0; i < 10; i++) km_sampler_add(&s, 1.0, 0, 0);
  /* noise is 0, but min_ms needs 40 more (+1 to run while the host decides) */
  ASSERT_EQ_INT(km_sampler_plan(&s, 10, &p), 10 + 40 + 1);
  /* hold (energy): no noise prediction, only the lead and max_samples */
  km_stop_rule r2 = rule(5, 300, 0.01, 0, 1e9);
  km_sampler_init(&s, &r2, a, b);
  for (int i = 0; i < 10; i++) km_sampler_add(&s, 1.0, 0, 1);
  p.hold = 1;
  ASSERT_EQ_INT(km_sampler_plan(&s, 10, &p), 10 + 63);
}

/* The loop km.timing runs, simulated: queue what plan says, take samples one by one.
 * A stable series stops at 20 with nothing queued beyond it; a noisy one stops where the
 * rule says, with at most one sample queued beyond. */
static void simulate(double amp, int *n_used, int *n_queued) {
  double a[MAXN], b[MAXN];
  km_stop_rule r = rule(20, 300, 0.002, 0, 1e9);
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  km_pace p = pace(0, 0.02, 0);
  int queued = km_sampler_plan(&s, 0, &p), taken = 0;
  while (s.stop == KM_SAMPLE_ON && taken < queued) {
    km_sampler_add(&s, series(taken, amp), 0, 0);
    taken++;
    p.sample_ms = 1.0;
    queued = km_sampler_plan(&s, queued, &p);
  }
  *n_used = s.n;
  *n_queued = queued;
}

TEST(simulated_loop_overshoot) {
  int used, queued;
  simulate(0.0005, &used, &queued);
  ASSERT_EQ_INT(used, 20);
  ASSERT_EQ_INT(queued, 20);
  simulate(0.03, &used, &queued);
  ASSERT_EQ_INT(used, first_sufficient(0.03, 20, 300, 0.002));
  ASSERT(queued - used <= 1);
}

TEST(protocol_key) {
  km_timing_protocol p = {"cold", 1, 3, 1, 0, 0, 1, {20, 300, 0.002, 0, 2000, 0, 0, KM_NOISE_IQR, {0, 0, 0, 0, 0, 0, 0}}};
  char k[256];
  int len = km_timing_protocol_key(&p, k, sizeof k);
  ASSERT_EQ_STR(k, "km.timing/3 mode=cold rep=1 warmup=3,1ms stop=noise<=0.002,n=20..300,min_ms=0,max_ms=2000 "
                   "flush=2xL2 energy=0 gate=1");
  ASSERT_EQ_INT(len, (int)strlen(k));
  char k2[256];
  /* the defaults both bindings start from are these */
  km_timing_protocol d;
  km_timing_protocol_default(&d);
  km_timing_protocol_key(&d, k2, sizeof k2);
  ASSERT_EQ_STR(k2, k);
  /* every field shows */
  km_timing_protocol q = p;
  q.mode = "warm";
  km_timing_protocol_key(&q, k2, sizeof k2);
  ASSERT_EQ_STR(k2, "km.timing/3 mode=warm rep=1 warmup=3,1ms stop=noise<=0.002,n=20..300,min_ms=0,max_ms=2000 energy=0 gate=1");
  q = p; q.stop.early_samples = 5; q.stop.max_ci = 0.0025; q.stop.min_samples = 10;
  km_timing_protocol_key(&q, k2, sizeof k2);
  ASSERT(strstr(k2, ",n=10..300,early=5,ci<=0.0025,min_ms=0,") != NULL);
  q = p; q.flush_bytes = 100663296;
  km_timing_protocol_key(&q, k2, sizeof k2);
  ASSERT(strstr(k2, " flush=100663296 ") != NULL);
  q = p; q.stop.max_noise = 0.1 + 0.2; /* shortest exact form: 17 digits here */
  km_timing_protocol_key(&q, k2, sizeof k2);
  ASSERT(strstr(k2, "noise<=0.30000000000000004,") != NULL);
  km_timing_protocol variants[9];
  for (int i = 0; i < 9; i++) variants[i] = p;
  variants[0].rep = 2; variants[1].warmup = 4; variants[2].warmup_ms = 6; variants[3].energy = 1;
  variants[4].stop.min_samples = 10; variants[5].stop.min_ms = 1; variants[6].gate = 0;
  variants[7].stop.early_samples = 5;
  variants[8].stop.noise_stat = KM_NOISE_GINI;
  for (int i = 0; i < 9; i++) {
    km_timing_protocol_key(&variants[i], k2, sizeof k2);
    ASSERT(strcmp(k, k2) != 0);
  }
  /* a short buffer is truncated, the needed length still returned */
  char small[8];
  ASSERT_EQ_INT(km_timing_protocol_key(&p, small, sizeof small), len);
  ASSERT_EQ_INT((int)strlen(small), 7);
  ASSERT_EQ_INT(km_timing_protocol_key(NULL, small, sizeof small), -1);
}

/* An early stop: at the first n in early..min-1 whose noise is <= target * n / min, else the
 * usual rule from min on; the target that held is km_stop_target's. */
TEST(an_early_stop_needs_a_tighter_noise) {
  double a[MAXN], b[MAXN];
  km_stop_rule r = rule(10, 300, 0.005, 0, 1e9);
  r.early_samples = 5;
  ASSERT_EQ_INT(km_stop_rule_valid(&r), 0);
  ASSERT_NEAR(km_stop_target(&r, 4), -1, 0);
  ASSERT_NEAR(km_stop_target(&r, 5), 0.0025, 1e-15);
  ASSERT_NEAR(km_stop_target(&r, 8), 0.004, 1e-15);
  ASSERT_NEAR(km_stop_target(&r, 10), 0.005, 0);
  ASSERT_NEAR(km_stop_target(&r, 40), 0.005, 0);
  km_stop_rule bad = r;
  bad.early_samples = 11;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad.early_samples = -1;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  km_sampler s;
  /* a quiet series stops at 5 */
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 5; i++) km_sampler_add(&s, series(i, 0.001), 0, 0);
  ASSERT_EQ_INT(s.stop, KM_STOP_NOISE);
  ASSERT_EQ_INT(s.n, 5);
  /* a series whose noise at n lies between the early bound and the target goes on: each n
   * from 5 stops exactly where the slow computation says */
  double amps[] = {0.004, 0.008, 0.012, 0.02};
  for (int k = 0; k < 4; k++) {
    int want = -1;
    double c[MAXN];
    for (int n = 5; n <= 300 && want < 0; n++) {
      for (int i = 0; i < n; i++) c[i] = series(i, amps[k]);
      qsort(c, (size_t)n, sizeof(double), km_stats_cmp_double);
      if (km_stats_rel_noise(c, n) <= km_stop_target(&r, n)) want = n;
    }
    km_sampler_init(&s, &r, a, b);
    for (int i = 0; s.stop == KM_SAMPLE_ON; i++) km_sampler_add(&s, series(i, amps[k]), 0, 0);
    ASSERT_EQ_INT(s.n, want);
    /* without the early stop, never below 10 */
    km_stop_rule late = rule(10, 300, 0.005, 0, 1e9);
    km_sampler_init(&s, &late, a, b);
    for (int i = 0; s.stop == KM_SAMPLE_ON; i++) km_sampler_add(&s, series(i, amps[k]), 0, 0);
    ASSERT(s.n >= 10 && s.n >= want);
  }
  /* early_samples == min_samples is the plain rule */
  km_stop_rule same = rule(10, 300, 0.005, 0, 1e9);
  same.early_samples = 10;
  ASSERT_NEAR(km_stop_target(&same, 9), -1, 0);
}

/* With an early stop, the plan queues up to early_samples before the rule is asked, then
 * one more while the host decides (none for serial work); serial work is never queued ahead. */
TEST(plan_with_an_early_stop_and_serial_work) {
  double a[MAXN], b[MAXN];
  km_stop_rule r = rule(10, 300, 0.005, 0, 1e9);
  r.early_samples = 5;
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  km_pace p = pace(0.001, 0.05, 0); /* would want 63 ahead */
  ASSERT_EQ_INT(km_sampler_plan(&s, 0, &p), 5);
  for (int i = 0; i < 5; i++) km_sampler_add(&s, series(i, 0.05), 0, 0);
  ASSERT_EQ_INT(s.stop, KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_plan(&s, 5, &p), 7);
  p.serial = 1;
  ASSERT_EQ_INT(km_sampler_plan(&s, 5, &p), 6);
  km_sampler_init(&s, &r, a, b);
  ASSERT_EQ_INT(km_sampler_plan(&s, 0, &p), 1);
  km_sampler_add(&s, 1.0, 0, 0);
  ASSERT_EQ_INT(km_sampler_plan(&s, 1, &p), 2);
  /* past min_samples too: one at a time */
  for (int i = 1; i < 12; i++) km_sampler_add(&s, series(i, 0.05), 0, 0);
  ASSERT_EQ_INT(s.stop, KM_SAMPLE_ON);
  ASSERT_EQ_INT(km_sampler_plan(&s, 12, &p), 13);
}

/* The median's order-statistic interval (>= 90% coverage): the order statistics a binomial
 * table gives, and a noise stop held by it where max_ci is set. */
TEST(the_median_interval_from_order_statistics) {
  ASSERT_EQ_INT(km_stats_median_ci_k(4), 0); /* 2 x 1/16 > 0.10 */
  ASSERT_EQ_INT(km_stats_median_ci_k(5), 1); /* 2 x 1/32 */
  ASSERT_EQ_INT(km_stats_median_ci_k(7), 1); /* 2 x 8/128 > 0.10 for k = 2 */
  ASSERT_EQ_INT(km_stats_median_ci_k(8), 2); /* 2 x 9/256 */
  ASSERT_EQ_INT(km_stats_median_ci_k(10), 2); /* 2 x 56/1024 > 0.10 for k = 3 */
  ASSERT_EQ_INT(km_stats_median_ci_k(20), 6); /* 2 x 0.0207; k = 7: 2 x 0.0577 */
  ASSERT_EQ_INT(km_stats_median_ci_k(300), 136);
  double five[] = {0.99, 1.0, 1.0, 1.0, 1.03};
  ASSERT_NEAR(km_stats_median_ci(five, 5), 0.02, 1e-12);
  ASSERT(isinf(km_stats_median_ci(five, 4)));
  km_stop_rule r = rule(10, 300, 0.005, 0, 1e9);
  r.early_samples = 5;
  r.max_ci = 0.0025;
  ASSERT_EQ_INT(km_stop_rule_valid(&r), 0);
  double samples[MAXN], sorted[MAXN];
  km_sampler s;
  km_sampler_init(&s, &r, samples, sorted);
  double xs[] = {1, 1, 1, 1, 1.02, 1, 1, 1.001, 0.999};
  int stopped = 0;
  for (int i = 0; i < 9 && !stopped; i++) stopped = km_sampler_add(&s, xs[i], 0, 0) == KM_STOP_NOISE;
  ASSERT_EQ_INT(s.n, 8); /* the IQR alone stops at 5; the interval at 8 (2nd to 7th) */
  r.max_ci = -1;
  ASSERT(km_stop_rule_valid(&r) != 0);
}

/* The Gini rule: a noise stop at exactly the first n >= min_samples whose
 * km_stats_gini_noise is <= the target (computed the slow way), the statistic the sampler
 * keeps; its key names it; an unknown statistic is refused. */
/* Whether the default protocol with stop rule r has `want` in its key. */
static int key_has(const km_stop_rule *r, const char *want) {
  km_timing_protocol p;
  km_timing_protocol_default(&p);
  p.stop = *r;
  char k[256];
  km_timing_protocol_key(&p, k, sizeof k);
  return strstr(k, want) != NULL;
}

TEST(the_gini_rule_stops_at_the_first_sufficient_count) {
  km_stop_rule r = rule(5, 300, 0.0022, 0, 1e9);
  r.noise_stat = KM_NOISE_GINI;
  ASSERT_EQ_INT(km_stop_rule_valid(&r), 0);
  ASSERT_EQ_STR(km_noise_name(KM_NOISE_GINI), "gini");
  ASSERT_EQ_STR(km_noise_name(KM_NOISE_IQR), "iqr");
  ASSERT(km_noise_name(2) == NULL);
  ASSERT_EQ_INT(km_noise_stat("gini"), KM_NOISE_GINI);
  ASSERT_EQ_INT(km_noise_stat("mad"), -1);
  ASSERT_EQ_INT(km_noise_stat(NULL), -1);
  double amps[] = {0.001, 0.004, 0.008, 0.015, 0.03};
  int last = 0;
  for (int k = 0; k < 5; k++) {
    int want = -1;
    double c[MAXN];
    for (int n = 5; n <= 300 && want < 0; n++) {
      for (int i = 0; i < n; i++) c[i] = series(i, amps[k]);
      qsort(c, (size_t)n, sizeof(double), km_stats_cmp_double);
      if (km_stats_gini_noise(c, n) <= 0.0022) want = n;
    }
    ASSERT(want >= 5);
    ASSERT(want >= last); /* more spread, more samples */
    last = want;
    double a[MAXN], b[MAXN];
    km_sampler s;
    km_sampler_init(&s, &r, a, b);
    for (int i = 0; s.stop == KM_SAMPLE_ON; i++) km_sampler_add(&s, series(i, amps[k]), 0, 0);
    ASSERT_EQ_INT(s.stop, KM_STOP_NOISE);
    ASSERT_EQ_INT(s.n, want);
    ASSERT_NEAR(s.noise, km_stats_gini_noise(s.sorted, s.n), 0);
  }
  ASSERT(last > 20); /* +-3% samples take many */
  /* five equal samples stop at five; a sixth far one does not stop what five would not */
  double a[MAXN], b[MAXN];
  km_sampler s;
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 5; i++) km_sampler_add(&s, 1.0, 0, 0);
  ASSERT_EQ_INT(s.stop, KM_STOP_NOISE);
  ASSERT_EQ_INT(s.n, 5);
  /* four agreeing samples and one 2% away: the IQR's error is 0, the Gini's is not */
  double xs[] = {1, 1, 1.02, 1, 1};
  km_sampler_init(&s, &r, a, b);
  for (int i = 0; i < 5; i++) km_sampler_add(&s, xs[i], 0, 0);
  ASSERT_EQ_INT(s.stop, KM_SAMPLE_ON);
  km_stop_rule iqr = rule(5, 300, 0.0022, 0, 1e9);
  km_sampler_init(&s, &iqr, a, b);
  for (int i = 0; i < 5; i++) km_sampler_add(&s, xs[i], 0, 0);
  ASSERT_EQ_INT(s.stop, KM_STOP_NOISE);
  km_stop_rule bad = r;
  bad.noise_stat = 2;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad.noise_stat = -1;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  /* the key */
  ASSERT(key_has(&r, " stop=gini<=0.0022,n=5..300,min_ms=0,"));
  km_stop_rule iqr_key = r;
  iqr_key.noise_stat = KM_NOISE_IQR;
  ASSERT(key_has(&iqr_key, " stop=noise<=0.0022,n=5..300,min_ms=0,"));
}

/* A second noise test (km_stop_alt): either stops. Calls with a tight core (+-0.03%) and every
 * third one 2% late: the Gini error, which reads every pair of the middle samples, stays over
 * 0.21% for some 50 calls; the IQR's error and the median's order-statistic interval settle
 * the median in 23. An alt that is off, or asks for an interval these calls never give, stops
 * nothing sooner; a bad alt is refused; the key names it. */
static double late_third(int i) {
  double core = 1 + 0.0003 * sin(i * 1.7);
  return i % 3 == 0 ? core + 0.02 + 0.001 * cos(i) : core;
}
static int stop_n(const km_stop_rule *r) {
  double a[MAXN], b[MAXN];
  km_sampler s;
  km_sampler_init(&s, r, a, b);
  for (int i = 1; s.stop == KM_SAMPLE_ON && i <= 300; i++) km_sampler_add(&s, late_third(i), 0, 0);
  return s.stop == KM_STOP_NOISE ? s.n : -1;
}
TEST(an_alt_noise_test_stops_where_the_rule_alone_would_not) {
  km_stop_rule r = rule(5, 300, 0.0021, 0, 1e9);
  r.noise_stat = KM_NOISE_GINI;
  int alone = stop_n(&r);
  ASSERT(alone > 40);
  km_stop_rule both = r;
  both.alt.on = 1, both.alt.noise_stat = KM_NOISE_IQR, both.alt.min_samples = 10, both.alt.early_samples = 0;
  both.alt.max_noise = 0.004, both.alt.max_ci = 0.002;
  ASSERT_EQ_INT(km_stop_rule_valid(&both), 0);
  int either = stop_n(&both);
  ASSERT(either >= 10 && either <= 30);
  km_stop_rule narrow = both;
  narrow.alt.max_ci = 0.00001; /* the core's own spread is wider */
  ASSERT_EQ_INT(stop_n(&narrow), alone);
  km_stop_rule off = both;
  off.alt.on = 0;
  ASSERT_EQ_INT(stop_n(&off), alone);
  km_stop_rule bad = both;
  bad.alt.min_samples = 0;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad = both, bad.alt.noise_stat = 7;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  bad = both, bad.alt.early_samples = 11;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
  ASSERT(key_has(&both, " stop=gini<=0.0021,n=5..300|noise<=0.004,n>=10,early=0,ci<=0.002,min_ms=0,"));
  bad = both, bad.alt.min_median_ms = -1;
  ASSERT_EQ_INT(km_stop_rule_valid(&bad), -1);
}

/* The alt stops nothing before the rule's own first count (a caller's least count holds for
 * both tests), nor where the median is below its min_median_ms (these calls' median: ~1). */
TEST(an_alt_keeps_the_rules_least_count_and_its_least_median) {
  km_stop_rule r = rule(5, 300, 0.0021, 0, 1e9);
  r.noise_stat = KM_NOISE_GINI;
  r.alt.on = 1, r.alt.noise_stat = KM_NOISE_IQR, r.alt.min_samples = 10, r.alt.early_samples = 5;
  r.alt.max_noise = 0.004, r.alt.max_ci = 0.002;
  int either = stop_n(&r);
  ASSERT(either >= 10 && either <= 30);
  km_stop_rule late = r;
  late.min_samples = either + 5, late.early_samples = 0; /* a caller's least count above it */
  ASSERT(stop_n(&late) >= either + 5);
  km_stop_rule early = r;
  early.min_samples = either + 5, early.early_samples = either + 2;
  ASSERT(stop_n(&early) >= either + 2);
  km_stop_rule below = r;
  below.alt.min_median_ms = 1.5; /* the median is under it: the alt stops nothing */
  r.alt.on = 0;
  ASSERT_EQ_INT(stop_n(&below), stop_n(&r));
  km_stop_rule above = below;
  above.alt.min_median_ms = 0.5;
  ASSERT_EQ_INT(stop_n(&above), either);
  ASSERT(key_has(&above, "|noise<=0.004,n>=10,early=5,ci<=0.002,median>=0.5ms,min_ms=0,"));
}

int main(void) {
  RUN(defaults_and_validation);
  RUN(the_gini_rule_stops_at_the_first_sufficient_count);
  RUN(an_alt_noise_test_stops_where_the_rule_alone_would_not);
  RUN(an_alt_keeps_the_rules_least_count_and_its_least_median);
  RUN(the_median_interval_from_order_statistics);
  RUN(an_early_stop_needs_a_tighter_noise);
  RUN(plan_with_an_early_stop_and_serial_work);
  RUN(stops_at_the_first_sufficient_count);
  RUN(a_stable_kernel_stops_at_min_samples);
  RUN(min_time_holds_a_noise_stop);
  RUN(max_samples_max_time_and_hold);
  RUN(plan_queues_little_first_then_from_the_measured_time);
  RUN(plan_never_queues_past_what_the_rule_may_need);
  RUN(plan_with_min_time_and_hold);
  RUN(simulated_loop_overshoot);
  RUN(protocol_key);
  return DONE();
}
