/* km_stats_core.c — sample statistics for timing (km_stats_core.h). */
#include <math.h>
#include <stdatomic.h>

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

/* ==== the median's standard error from the trimmed Gini mean difference ==== */

/* The standard normal's quantile by Newton's method on Phi(x) = erfc(-x / sqrt 2) / 2 from x
 * (a nearby quantile: a few steps), steps held to 1 so none overshoots from the flat tails. */
static double normal_quantile(double p, double x) {
  for (int it = 0; it < 100; it++) {
    double step = (0.5 * erfc(-x * 0.70710678118654752) - p) / (exp(-0.5 * x * x) * 0.39894228040143268);
    if (step > 1) step = 1;
    if (step < -1) step = -1;
    x -= step;
    if (fabs(step) < 1e-12) break;
  }
  return x;
}

/* The Gini mean difference of m sorted values, sum over pairs |x_i - x_j| / C(m, 2), in one
 * pass: the i-th smallest (0-based) counts +1 against the i below it and -1 against the
 * m - 1 - i above. */
static double gini(const double *s, int m) {
  double g = 0;
  for (int i = 0; i < m; i++) g += (2.0 * i - m + 1) * s[i];
  return 2 * g / ((double)m * (m - 1));
}

int km_stats_gini_trim(int n) { return n / 10; }

static double gini_unbias_at(int n) {
  int g = km_stats_gini_trim(n), m = n - 2 * g;
  if (m < 2) return NAN;
  if (g == 0) return 0.886226925452758; /* E|X - Y| = 2 sigma / sqrt(pi) for every n */
  /* E of the middle order statistics of n standard normals (Blom: Phi^-1((i - 0.375) /
   * (n + 0.25)) for the i-th, 1-based) in the same weighted sum; they are symmetric about 0,
   * so the upper half twice, each quantile started from the one before */
  double w = 0, x = 0;
  for (int i = (m + 1) / 2; i < m; i++) {
    x = normal_quantile((g + i + 1 - 0.375) / (n + 0.25), x);
    w += 2 * (2.0 * i - m + 1) * x;
  }
  return 1 / (2 * w / ((double)m * (m - 1)));
}

/* A timing asks at every sample (n = 5, 6, ... up to its cap) and each answer costs about n/2
 * normal quantiles: kept per n below UNBIAS_KEPT (0: not computed yet; any thread may store
 * the same value). */
#define UNBIAS_KEPT 1024
static _Atomic double unbias_kept[UNBIAS_KEPT];
double km_stats_gini_unbias(int n) {
  if (n < 0 || n >= UNBIAS_KEPT) return gini_unbias_at(n);
  double v = atomic_load_explicit(&unbias_kept[n], memory_order_relaxed);
  if (v != 0) return v;
  v = gini_unbias_at(n);
  atomic_store_explicit(&unbias_kept[n], v, memory_order_relaxed);
  return v;
}

double km_stats_gini_sigma(const double *sorted, int n) {
  if (n < 3) return INFINITY;
  int g = km_stats_gini_trim(n);
  return gini(sorted + g, n - 2 * g) * km_stats_gini_unbias(n);
}

double km_stats_gini_noise(const double *sorted, int n) {
  if (n < 3) return INFINITY;
  double med = km_stats_quantile(sorted, n, 0.5);
  if (!(med > 0)) return INFINITY;
  double se = 1.2533 * km_stats_gini_sigma(sorted, n) / sqrt((double)n) / med;
  return se * (1 + 1 / sqrt((double)n));
}
