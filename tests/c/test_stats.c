/* test_stats.c — the sample statistics km.timing and km_time share (km_stats_core.c). */
#include <math.h>
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

int main(void) {
  RUN(quantiles_interpolate);
  RUN(sorting_and_noise);
  return DONE();
}
