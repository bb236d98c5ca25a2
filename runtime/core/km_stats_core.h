/* km_stats_core.h — the sample statistics km.timing and the C API's km_time share (pure C).
 * Inputs are read only; nothing is allocated. */
#ifndef KM_STATS_CORE_H
#define KM_STATS_CORE_H

/* qsort comparator for doubles, ascending. */
int km_stats_cmp_double(const void *a, const void *b);
/* Linear-interpolated quantile q (0..1) of a sorted array of n values; NaN when n <= 0. */
double km_stats_quantile(const double *sorted, int n, double q);
/* Relative standard error of the median: 1.2533 * sigma / sqrt(n) / median, with sigma
 * estimated robustly from the interquartile range; infinity for n < 3 or a median <= 0. */
double km_stats_rel_noise(const double *sorted, int n);
/* The order statistics k (1-based) that bound the median's distribution-free interval of at
 * least 90% coverage, sorted[k-1] .. sorted[n-k]: the largest k with
 * 2 * P(Binomial(n, 1/2) <= k - 1) <= 0.10; 0 where none (n < 5). */
int km_stats_median_ci_k(int n);
/* That interval's half-width relative to the median: (sorted[n-k] - sorted[k-1]) / 2 /
 * median; infinity where there is none or the median is <= 0. */
double km_stats_median_ci(const double *sorted, int n);

#endif
