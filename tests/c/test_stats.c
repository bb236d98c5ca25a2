/* test_stats.c — the sample statistics km.timing and km_time share (km_stats_core.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "test.h"
#include "km_stats_core.h"

TEST(quantiles_interpolate) {
  double s[] = {1, 2, 3, 4};
  ASSERT_NEAR(km_stats_quantile(s, 4, 0.5), 2.5, 1e-12);
  ASSERT_NEAR(km_stats_quantile(s, 4, 0.0), 1.0, 1e-12);
  ASSERT_NEAR(km_stats_quantile(s, 4, 1.0), 4.0, 1e-12);
  ASSERT_NEAR(km_stats_quantile(s, 4, 0.25), 1.75, 1e-12);
  ASSERT(isnan(km_stats_quantile(s, 0, 0.5)));
}

TEST(sorting_and_noise) {
  double s[] = {5, 1, 4, 2, 3};
  qsort(s, 5, sizeof(double), km_stats_cmp_double);
  ASSERT_NEAR(s[0], 1.0, 0); ASSERT_NEAR(s[4], 5.0, 0);
  /* IQR 2, sigma 2/1.349, median 3, n 5 */
  ASSERT_NEAR(km_stats_rel_noise(s, 5), 1.2533 * (2 / 1.349) / sqrt(5.0) / 3, 1e-12);
  ASSERT(isinf(km_stats_rel_noise(s, 2)));
  double z[] = {0, 0, 0};
  ASSERT(isinf(km_stats_rel_noise(z, 3)));
}

/* The trimmed Gini statistic by hand: 1..5 untrimmed (pairs' mean |difference| 2), and the
 * n / 10 smallest and largest left out from 10 samples on. */
TEST(gini_noise_by_hand) {
  double s[] = {1, 2, 3, 4, 5};
  double sigma = 2 * 0.886226925452758;
  ASSERT_NEAR(km_stats_gini_sigma(s, 5), sigma, 1e-12);
  ASSERT_NEAR(km_stats_gini_noise(s, 5), 1.2533 * sigma / sqrt(5.0) / 3 * (1 + 1 / sqrt(5.0)), 1e-12);
  ASSERT(isinf(km_stats_gini_noise(s, 2)));
  double z[] = {0, 0, 0};
  ASSERT(isinf(km_stats_gini_noise(z, 3)));
  ASSERT_EQ_INT(km_stats_gini_trim(9), 0);
  ASSERT_EQ_INT(km_stats_gini_trim(10), 1);
  ASSERT_EQ_INT(km_stats_gini_trim(29), 2);
  /* 1..8 between two far ends: their mean |difference| is 84 / 28 = 3, whatever the ends */
  double a[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 100}, b[] = {-50, 1, 2, 3, 4, 5, 6, 7, 8, 8.5};
  ASSERT_NEAR(km_stats_gini_sigma(a, 10), 3 * km_stats_gini_unbias(10), 1e-12);
  ASSERT_NEAR(km_stats_gini_sigma(b, 10), km_stats_gini_sigma(a, 10), 1e-12);
  /* from 10 on, larger than sqrt(pi)/2: the middle of the samples is closer together */
  ASSERT(km_stats_gini_unbias(10) > 1.2 && km_stats_gini_unbias(300) < 1.35);
  ASSERT(isnan(km_stats_gini_unbias(1)));
}

/* A deterministic normal draw (xorshift64*, Box-Muller). */
static unsigned long long rng_state = 88172645463325252ull;
static double unif(void) {
  rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
  return ((rng_state * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}
static double normal(void) { return sqrt(-2 * log(1 - unif())) * cos(6.283185307179586 * unif()); }

/* Unbiased for normal samples: the mean estimate of sigma over many sets of n is sigma, to
 * the simulation's error, for counts untrimmed and trimmed. */
TEST(gini_sigma_is_unbiased_for_normal_samples) {
  int ns[] = {5, 9, 10, 15, 20, 37, 100};
  for (int k = 0; k < 7; k++) {
    int n = ns[k], reps = 200000 / n;
    double x[100], sum = 0;
    for (int r = 0; r < reps; r++) {
      for (int i = 0; i < n; i++) x[i] = 2 + 0.5 * normal();
      qsort(x, (size_t)n, sizeof(double), km_stats_cmp_double);
      sum += km_stats_gini_sigma(x, n);
    }
    double mean = sum / reps / 0.5;
    if (fabs(mean - 1) > 0.01) fprintf(stderr, "# n %d: mean sigma estimate %.4f\n", n, mean);
    ASSERT(fabs(mean - 1) < 0.01);
  }
}

int main(void) {
  RUN(quantiles_interpolate);
  RUN(sorting_and_noise);
  RUN(gini_noise_by_hand);
  RUN(gini_sigma_is_unbiased_for_normal_samples);
  return DONE();
}
