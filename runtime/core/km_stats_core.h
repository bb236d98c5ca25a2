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

/* The same error estimated for a stop after every sample (the stop rule's noise "gini",
 * km_sampling_core.h), from sigma's estimate below, and inflated by 1 + 1/sqrt(n), about one
 * standard error of that estimate (its relative error is about 0.8/sqrt(n) to 0.9/sqrt(n)):
 * 1.2533 * sigma * (1 + 1/sqrt(n)) / sqrt(n) / median; infinity for n < 3 or a median <= 0.
 * The interquartile range of 5 to 9 samples is near 0 by chance often (two order statistics
 * close together): a rule that stops at the first small estimate stops noisy timings early.
 * The Gini mean difference reads every pair, so it is small only where all samples are close;
 * it is nearly as efficient as the standard deviation for normal noise, and trimmed it keeps a
 * few late samples from holding a timing up. tests/lua/test_stop_rule.lua simulates it. */
double km_stats_gini_noise(const double *sorted, int n);
/* sigma estimated from the Gini mean difference (the mean |x_i - x_j| over pairs) of the
 * sorted samples less the km_stats_gini_trim(n) smallest and largest, times
 * km_stats_gini_unbias(n); infinity for n < 3. */
double km_stats_gini_sigma(const double *sorted, int n);
/* The samples trimmed from each end: n / 10 (none under 10, so 5 to 9 samples are all read). */
int km_stats_gini_trim(int n);
/* The factor that makes the trimmed Gini mean difference of n normal samples an unbiased
 * estimate of sigma: sqrt(pi) / 2 untrimmed (exact), else from the expected normal order
 * statistics by Blom's approximation (within 0.3% of simulation, n = 10 to 300); NaN for n < 2. */
double km_stats_gini_unbias(int n);
/* The order statistics k (1-based) that bound the median's distribution-free interval of at
 * least 90% coverage, sorted[k-1] .. sorted[n-k]: the largest k with
 * 2 * P(Binomial(n, 1/2) <= k - 1) <= 0.10; 0 where none (n < 5). */
int km_stats_median_ci_k(int n);
/* That interval's half-width relative to the median: (sorted[n-k] - sorted[k-1]) / 2 /
 * median; infinity where there is none or the median is <= 0. */
double km_stats_median_ci(const double *sorted, int n);

#endif
