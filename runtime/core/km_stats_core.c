/* km_stats_core.c — sample statistics for timing (km_stats_core.h). */
#include <math.h>

#include "km_stats_core.h"

int km_stats_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double km_stats_quantile(const double *s, int n, double q) {
  if (n <= 0) return NAN;
  double pos = q * (n - 1);
  int i = (int)pos;
  double f = pos - i;
  return i + 1 < n ? s[i] * (1 - f) + s[i + 1] * f : s[i];
}

int km_stats_median_ci_k(int n) {
  if (n < 1) return 0;
  double pmf = pow(0.5, n), cdf = 0; /* P(X = i), P(X <= i - 1) as i counts up */
  int k = 0;
  for (int i = 0; i < n / 2; i++) {
    cdf += pmf; /* P(X <= i): the tail outside sorted[i] .. sorted[n - 1 - i] */
    if (2 * cdf > 0.10) break;
    k = i + 1;
    pmf = pmf * (n - i) / (i + 1);
  }
  return k;
}

double km_stats_median_ci(const double *sorted, int n) {
  int k = km_stats_median_ci_k(n);
  if (k < 1) return INFINITY;
  double med = km_stats_quantile(sorted, n, 0.5);
  return med > 0 ? (sorted[n - k] - sorted[k - 1]) / 2 / med : INFINITY;
}

double km_stats_rel_noise(const double *sorted, int n) {
  if (n < 3) return INFINITY;
  double med = km_stats_quantile(sorted, n, 0.5);
  double sigma = (km_stats_quantile(sorted, n, 0.75) - km_stats_quantile(sorted, n, 0.25)) / 1.349;
  return med > 0 ? 1.2533 * sigma / sqrt((double)n) / med : INFINITY;
}
