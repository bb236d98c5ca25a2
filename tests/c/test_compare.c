/* Pure C: dtype conversions and the host compare rule. */
#include <math.h>
#include "test.h"
#include "km.h"
#include "km_compare_core.h"
#include "km_dtype.h"

TEST(dtype_names) {
  ASSERT_EQ_INT(km_dtype_parse("f32"), KM_F32);
  ASSERT_EQ_INT(km_dtype_parse("bf16"), KM_BF16);
  ASSERT_EQ_INT(km_dtype_parse("f128"), -1);
  ASSERT_EQ_INT(km_dtype_size(KM_I64), 8);
  ASSERT_EQ_INT(km_dtype_size(KM_F16), 2);
  ASSERT_EQ_STR(km_dtype_npy(KM_I32), "<i4");
  ASSERT(km_dtype_npy(KM_BF16) == NULL);
}

TEST(half_roundtrip) {
  /* exact values, the largest half, the smallest subnormal, and rounding to even */
  ASSERT_EQ_INT(km_double_to_half(1.0), 0x3c00);
  ASSERT_EQ_INT(km_double_to_half(-2.0), 0xc000);
  ASSERT_EQ_INT(km_double_to_half(65504.0), 0x7bff);
  ASSERT_EQ_INT(km_double_to_half(65520.0), 0x7c00); /* ties to even -> Inf */
  ASSERT_EQ_INT(km_double_to_half(ldexp(1, -24)), 0x0001);
  ASSERT_EQ_INT(km_double_to_half(ldexp(1, -25)), 0x0000); /* tie to even: 0 */
  ASSERT_EQ_INT(km_double_to_half(1.0 + ldexp(1, -11)), 0x3c00); /* tie, even stays */
  ASSERT_EQ_INT(km_double_to_half(1.0 + 3 * ldexp(1, -11)), 0x3c02); /* tie, rounds up */
  ASSERT(isnan(km_half_to_double(km_double_to_half(NAN))));
  ASSERT_NEAR(km_half_to_double(0x3555), 0.333251953125, 0);
  ASSERT_NEAR(km_half_to_double(0x0001), ldexp(1, -24), 0);
  for (int h = 0; h < 0x7c00; h++) /* every finite positive half survives the round trip */
    if (km_double_to_half(km_half_to_double((uint16_t)h)) != h) T_FAIL("half 0x%04x does not round-trip", h);
}

TEST(bf16_roundtrip) {
  ASSERT_EQ_INT(km_double_to_bf16(1.0), 0x3f80);
  ASSERT_NEAR(km_bf16_to_double(0x4049), 3.140625, 0);
  ASSERT_EQ_INT(km_double_to_bf16(1.0 + ldexp(1, -8)), 0x3f80);     /* tie to even */
  ASSERT_EQ_INT(km_double_to_bf16(1.0 + 3 * ldexp(1, -8)), 0x3f82); /* tie, rounds up */
  ASSERT(isnan(km_bf16_to_double(km_double_to_bf16(NAN))));
}

TEST(int_saturation) {
  unsigned char b[8];
  km_dtype_set(KM_I8, b, 0, 300);
  ASSERT_EQ_INT((int8_t)b[0], 127);
  km_dtype_set(KM_U8, b, 0, -5);
  ASSERT_EQ_INT(b[0], 0);
  km_dtype_set(KM_I32, b, 0, -7);
  ASSERT_NEAR(km_dtype_get(KM_I32, b, 0), -7, 0);
}

TEST(pair_rule) {
  km_tol t = {1e-3, 1e-2, 0};
  ASSERT(km_compare_pair(1.0, 1.0, &t));
  ASSERT(km_compare_pair(1.011, 1.0, &t));   /* 0.011 <= 0.001 + 0.01 */
  ASSERT(!km_compare_pair(1.0115, 1.0, &t));
  ASSERT(!km_compare_pair(NAN, NAN, &t));    /* NaN never passes... */
  t.equal_nan = 1;
  ASSERT(km_compare_pair(NAN, NAN, &t));     /* ...unless asked */
  ASSERT(!km_compare_pair(NAN, 1.0, &t));
  ASSERT(km_compare_pair(INFINITY, INFINITY, &t));
  ASSERT(!km_compare_pair(INFINITY, -INFINITY, &t));
  ASSERT(!km_compare_pair(1e308, INFINITY, &t));
  km_tol huge = {INFINITY, 0, 0}; /* even an infinite tolerance does not pass NaN or Inf */
  ASSERT(!km_compare_pair(NAN, 0, &huge));
  ASSERT(!km_compare_pair(INFINITY, 0, &huge));
}

TEST(host_compare_report) {
  float got[6] = {1, 2, 3, NAN, INFINITY, 6}, want[6] = {1, 2.5f, 3, 4, 5, 6};
  km_tol t = {0, 0.1, 0};
  km_cmp_result r;
  ASSERT_EQ_INT(km_compare_host(KM_F32, got, want, 6, &t, &r), KM_OK);
  ASSERT_EQ_INT(r.ok, 0);
  ASSERT_EQ_INT(r.mismatches, 3);
  ASSERT_EQ_INT(r.first, 1);
  ASSERT_EQ_INT(r.nan_got, 1);
  ASSERT_EQ_INT(r.inf_got, 1);
  ASSERT_EQ_INT(r.n_examples, 3);
  ASSERT_EQ_INT(r.examples[2], 4);
  ASSERT_NEAR(r.max_abs, 0.5, 1e-12);
  ASSERT_NEAR(r.max_rel, 0.2, 1e-7);
  ASSERT_EQ_INT(r.compared, 6); /* the host compare reads every element */
}

TEST(host_compare_i64_exact) {
  int64_t a[2] = {(1LL << 62) + 1, 5}, b[2] = {(1LL << 62), 5};
  km_tol t = {0, 0, 0};
  km_cmp_result r;
  km_compare_host(KM_I64, a, b, 2, &t, &r);
  ASSERT_EQ_INT(r.mismatches, 1); /* equal as doubles, different as integers */
}

TEST(host_compare_bad_args) {
  km_cmp_result r;
  km_tol t = {0, 0, 0};
  ASSERT_EQ_INT(km_compare_host((km_dtype)99, "", "", 0, &t, &r), KM_EINVAL);
}

/* A sampled check's shift: one line in 2^want, lowered so that at least KM_LINES_MIN lines
 * (512 KiB) are read, every line of a smaller buffer. */
TEST(lines_shift) {
  ASSERT_EQ_INT(km_lines_shift(0, 4), 0);
  ASSERT_EQ_INT(km_lines_shift(4096 * 128, 4), 0);       /* 512 KiB: every line */
  ASSERT_EQ_INT(km_lines_shift(4096 * 128 * 2 - 128, 4), 0); /* 8191 lines */
  ASSERT_EQ_INT(km_lines_shift(4096 * 128 * 2, 4), 1);   /* 1 MiB: one in 2, 4096 read */
  ASSERT_EQ_INT(km_lines_shift(4096 * 128 * 16, 4), 4);  /* 8 MiB: as asked */
  ASSERT_EQ_INT(km_lines_shift(1ull << 30, 4), 4);
  ASSERT_EQ_INT(km_lines_shift(1ull << 30, 0), 0);
  ASSERT_EQ_INT(km_lines_shift(1ull << 30, 20), 11);     /* 2^23 lines: 2^12 of them read */
  ASSERT((((1ull << 30) / 128) >> km_lines_shift(1ull << 30, 20)) >= KM_LINES_MIN);
  ASSERT_EQ_INT(km_lines_shift(1ull << 60, 99), 40);          /* capped */
}

/* km_lines_drawn_bytes against km_util.cu's walk, byte by byte (struct lines with one byte a
 * unit: unit_at over units_visited, the units past the buffer's end not copied): for rows
 * of several lengths, buffers that end in a short line or not, every shift, many keys. */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
static uint64_t walk_bytes(uint64_t key, unsigned shift, uint64_t upl, uint64_t units) {
  uint64_t nlines = (units + upl - 1) / upl, visits = shift ? ((nlines + (1ull << shift) - 1) >> shift) * upl : units;
  uint64_t got = 0;
  for (uint64_t t = 0; t < visits; t++) {
    uint64_t u = t;
    if (shift) {
      uint64_t blk = t / upl, line = (blk << shift) + (mix(key ^ blk) & ((1ull << shift) - 1));
      if (line >= nlines) line = blk << shift;
      u = line * upl + t % upl;
    }
    if (u < units) got++;
  }
  return got;
}
TEST(lines_drawn_bytes) {
  const uint64_t lbs[] = {128, 12, 4096, 4};
  const uint64_t sizes[] = {0, 1, 12 * 1000, 12 * 1001 + 5, 4096 * 33 + 100, 128 * 77, 4 * 1000003};
  for (size_t i = 0; i < sizeof lbs / sizeof *lbs; i++)
    for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++)
      for (unsigned s = 0; s <= 5; s++)
        for (uint64_t key = 1; key < 40; key += 3) {
          km_lines l = {key * 0x9E3779B97F4A7C15ull, s, lbs[i]};
          ASSERT_EQ_INT(km_lines_drawn_bytes(&l, sizes[j]), walk_bytes(l.key, s, lbs[i], sizes[j]));
        }
  km_lines whole = {7, 0, 96};
  ASSERT_EQ_INT(km_lines_drawn_bytes(&whole, 1000), 1000); /* shift 0: every line */
  km_lines as_given = {7, 4, 256};                         /* rows: the shift is not lowered */
  ASSERT_EQ_INT(km_lines_used_shift(&as_given, 256 * 64), 4);
  km_lines lowered = {7, 4, 0};                            /* 128-byte lines: it is */
  ASSERT_EQ_INT(km_lines_used_shift(&lowered, 256 * 64), 0);
}

int main(void) {
  RUN(dtype_names);
  RUN(half_roundtrip);
  RUN(bf16_roundtrip);
  RUN(int_saturation);
  RUN(pair_rule);
  RUN(host_compare_report);
  RUN(host_compare_i64_exact);
  RUN(host_compare_bad_args);
  RUN(lines_shift);
  RUN(lines_drawn_bytes);
  return DONE();
}
