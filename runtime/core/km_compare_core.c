/* km_compare_core.c — the host side of km.compare (see km_compare_core.h). */
#include <math.h>
#include <string.h>
#include "km.h"
#include "km_compare_core.h"

int km_compare_pair(double a, double b, const km_tol *tol) {
  if (a == b) return 1; /* exact, including the same Inf */
  if (isnan(a) || isnan(b)) return tol->equal_nan && isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return 0;
  return fabs(a - b) <= tol->atol + tol->rtol * fabs(b);
}

int km_compare_host(km_dtype dt, const void *got, const void *want, uint64_t n,
                    const km_tol *tol, km_cmp_result *out) {
  if ((unsigned)dt >= KM_NDTYPES || !out || !tol || (n && (!got || !want))) return KM_EINVAL;
  memset(out, 0, sizeof *out);
  out->n = n;
  out->compared = n;
  out->first = -1;
  for (uint64_t i = 0; i < n; i++) {
    double a = km_dtype_get(dt, got, i), b = km_dtype_get(dt, want, i);
    int ok;
    if (dt == KM_I64) { /* exact in 64 bits, not through double */
      int64_t x, y;
      memcpy(&x, (const char *)got + i * 8, 8);
      memcpy(&y, (const char *)want + i * 8, 8);
      double d = x > y ? (double)((uint64_t)x - (uint64_t)y) : (double)((uint64_t)y - (uint64_t)x);
      ok = x == y || (d > 0 && d <= tol->atol + tol->rtol * fabs(b));
    } else ok = km_compare_pair(a, b, tol);
    if (isnan(a)) out->nan_got++;
    else if (isinf(a)) out->inf_got++;
    if (isfinite(a) && isfinite(b)) {
      double d = fabs(a - b);
      if (d > out->max_abs) out->max_abs = d;
      if (d > 0) {
        double rel = b != 0 ? d / fabs(b) : INFINITY;
        if (rel > out->max_rel) out->max_rel = rel;
      }
    }
    if (!ok) {
      if (out->first < 0) out->first = (int64_t)i;
      if (out->n_examples < KM_CMP_EXAMPLES) out->examples[out->n_examples++] = (int64_t)i;
      out->mismatches++;
    }
  }
  out->ok = out->mismatches == 0;
  return KM_OK;
}

int km_rel_l2_host(km_dtype dt, const void *got, const void *want, uint64_t n, double *rel) {
  if ((unsigned)dt >= KM_NDTYPES || !rel || (n && (!got || !want))) return KM_EINVAL;
  double err = 0, ref = 0;
  for (uint64_t i = 0; i < n; i++) {
    double a = km_dtype_get(dt, got, i), b = km_dtype_get(dt, want, i);
    if (!isfinite(b)) {
      if (a == b || (isnan(a) && isnan(b))) continue;
      *rel = INFINITY;
      return KM_OK;
    }
    if (!isfinite(a)) {
      *rel = INFINITY;
      return KM_OK;
    }
    err += (a - b) * (a - b);
    ref += b * b;
  }
  *rel = ref > 0 ? sqrt(err / ref) : (err > 0 ? INFINITY : 0);
  return KM_OK;
}

unsigned km_lines_shift(uint64_t bytes, unsigned want) {
  uint64_t lines = (bytes + 127) / 128;
  unsigned s = want > 40 ? 40 : want;
  while (s > 0 && (lines >> s) < KM_LINES_MIN) s--;
  return s;
}

unsigned km_lines_used_shift(const km_lines *l, uint64_t bytes) {
  return l->bytes ? l->shift : km_lines_shift(bytes, l->shift);
}

static uint64_t splitmix64(uint64_t x) { /* km_util.cu's */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t km_lines_drawn_bytes(const km_lines *l, uint64_t bytes) {
  uint64_t lb = l->bytes ? l->bytes : 128;
  unsigned s = km_lines_used_shift(l, bytes);
  uint64_t nlines = (bytes + lb - 1) / lb;
  if (!nlines) return 0;
  uint64_t blocks = s ? ((nlines + (1ull << s) - 1) >> s) : nlines, last_blk = blocks - 1;
  /* the last block's line, as unit_at draws it */
  uint64_t line = s ? (last_blk << s) + (splitmix64(l->key ^ last_blk) & ((1ull << s) - 1)) : last_blk;
  if (line >= nlines) line = last_blk << s;
  uint64_t tail = bytes - (nlines - 1) * lb; /* the last line's length */
  return (blocks - 1) * lb + (line == nlines - 1 ? tail : lb);
}
