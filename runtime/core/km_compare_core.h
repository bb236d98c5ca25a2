/* km_compare_core.h — tolerance compare with torch.allclose semantics, in pure C.
 *
 * An element passes when got == want, or both are finite and
 * |got - want| <= atol + rtol * |want|. NaN never passes unless equal_nan is set and both
 * are NaN; an Inf passes only against the same Inf. km.compare runs the same rule on the
 * GPU (runtime/kernels/km_util.cu, km_compare) for device buffers. */
#ifndef KM_COMPARE_CORE_H
#define KM_COMPARE_CORE_H
#include <stdint.h>
#include "km_dtype.h"

#define KM_CMP_EXAMPLES 32

typedef struct {
  double atol, rtol;
  int equal_nan;
} km_tol;

typedef struct {
  int ok;
  uint64_t n, mismatches, nan_got, inf_got;
  uint64_t compared;            /* elements read: n, or those of a sample of lines (km_lines) */
  double max_abs, max_rel;      /* over pairs where both are finite */
  int64_t first;                /* lowest mismatching index, -1 if none */
  int n_examples;               /* mismatching indices, ascending */
  int64_t examples[KM_CMP_EXAMPLES];
} km_cmp_result;

/* A check of a sample of a buffer's 128-byte lines (a timed call's, km.judge's check_lines):
 * one line in each block of 2^shift lines, at an offset drawn from key (km_util.cu's struct
 * lines); shift 0 reads every line. bytes > 0: lines of that many bytes (a task's rows,
 * km.judge.rows), the shift then taken as given (the caller keeps its own least count, the
 * same for every buffer of those rows); 0: 128-byte lines, the shift lowered for a small
 * buffer (km_lines_shift). */
typedef struct km_lines {
  uint64_t key;
  unsigned shift;
  uint64_t bytes;
} km_lines;

/* The shift a sample `l` of a buffer of `bytes` is read with (above). */
unsigned km_lines_used_shift(const km_lines *l, uint64_t bytes);

/* How many bytes the lines `l` draws from a buffer of `bytes` hold (km_util.cu's
 * km_lines_copy: its compact copy's length): every line drawn is l->bytes long (128 where 0),
 * except the buffer's short last line where it is drawn. The draw is the device's (unit_at). */
uint64_t km_lines_drawn_bytes(const km_lines *l, uint64_t bytes);

/* A sampled check still reads at least this many lines of a buffer (512 KiB), every line of
 * a smaller one. */
#define KM_LINES_MIN 4096

/* The shift a check of `bytes` bytes reads with: `want` (one line in 2^want), less where
 * that would read fewer than KM_LINES_MIN lines. */
unsigned km_lines_shift(uint64_t bytes, unsigned want);

/* Returns 1 when the pair passes. */
int km_compare_pair(double got, double want, const km_tol *tol);

/* Compares n elements of two host arrays of type dt. Returns 0 or KM_EINVAL. */
int km_compare_host(km_dtype dt, const void *got, const void *want, uint64_t n,
                    const km_tol *tol, km_cmp_result *out);

/* The norm-wise relative error of n elements of two host arrays of type dt:
 * sqrt(sum (got - want)^2) / sqrt(sum want^2), accumulated in double. Infinity where got
 * holds a NaN or an infinity where want does not, or where want is all zeros and got is not;
 * 0 where both are all zeros. Returns 0 or KM_EINVAL. */
int km_rel_l2_host(km_dtype dt, const void *got, const void *want, uint64_t n, double *rel);
#endif
