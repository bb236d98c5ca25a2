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
  double max_abs, max_rel;      /* over pairs where both are finite */
  int64_t first;                /* lowest mismatching index, -1 if none */
  int n_examples;               /* mismatching indices, ascending */
  int64_t examples[KM_CMP_EXAMPLES];
} km_cmp_result;

/* Returns 1 when the pair passes. */
int km_compare_pair(double got, double want, const km_tol *tol);

/* Compares n elements of two host arrays of type dt. Returns 0 or KM_EINVAL. */
int km_compare_host(km_dtype dt, const void *got, const void *want, uint64_t n,
                    const km_tol *tol, km_cmp_result *out);
#endif
