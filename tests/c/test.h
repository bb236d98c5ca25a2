/* test.h — a tiny TAP test header for the pure C cores.
 *
 *   TEST(name) { ASSERT_EQ_INT(1 + 1, 2); }
 *   int main(void) { RUN(name); return DONE(); }
 *
 * Each TEST is one TAP line; an ASSERT failure prints both sides and ends that test. */
#ifndef KM_TEST_H
#define KM_TEST_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int t_count, t_failed, t_cur_failed;

#define TEST(name) static void test_##name(void)
#define RUN(name)                                                         \
  do {                                                                    \
    t_cur_failed = 0;                                                     \
    test_##name();                                                        \
    t_count++;                                                            \
    if (t_cur_failed) t_failed++;                                         \
    printf("%s %d - %s\n", t_cur_failed ? "not ok" : "ok", t_count, #name); \
    fflush(stdout);                                                       \
  } while (0)
#define DONE() (printf("1..%d\n", t_count), t_failed ? 1 : 0)

#define T_FAIL(...)                                                       \
  do {                                                                    \
    printf("# %s:%d: ", __FILE__, __LINE__);                              \
    printf(__VA_ARGS__);                                                  \
    printf("\n");                                                         \
    t_cur_failed = 1;                                                     \
    return;                                                               \
  } while (0)

#define ASSERT(c) do { if (!(c)) T_FAIL("assertion failed: %s", #c); } while (0)
#define ASSERT_EQ_INT(a, b)                                               \
  do {                                                                    \
    long long _a = (long long)(a), _b = (long long)(b);                   \
    if (_a != _b) T_FAIL("%s == %s: got %lld, want %lld", #a, #b, _a, _b); \
  } while (0)
#define ASSERT_EQ_STR(a, b)                                               \
  do {                                                                    \
    const char *_a = (a), *_b = (b);                                      \
    if (!_a || !_b || strcmp(_a, _b))                                     \
      T_FAIL("%s == %s: got \"%s\", want \"%s\"", #a, #b, _a ? _a : "(null)", _b ? _b : "(null)"); \
  } while (0)
#define ASSERT_NEAR(a, b, tol)                                            \
  do {                                                                    \
    double _a = (a), _b = (b);                                            \
    if (!(fabs(_a - _b) <= (tol)))                                        \
      T_FAIL("%s ~= %s: got %.17g, want %.17g (tol %g)", #a, #b, _a, _b, (double)(tol)); \
  } while (0)
#endif
