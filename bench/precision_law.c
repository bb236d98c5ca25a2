/* precision_law.c — the bound behind verify's precision trial (docs/security.md, "What an
 * fp32 verdict promises"), simulated on the CPU: an fp32 GEMM whose operands were rounded to
 * fp16, TF32 or bf16 (accumulated in fp32, as tensor cores do) against honest fp32 GEMMs with
 * other summation orders (reversed; 8 partial sums, as a split or blocked kernel), each
 * judged against an fp32 reference (sequential FMA, as a cuBLAS thread accumulates along K)
 * as km.judge judges it: elementwise atol = rtol = 1e-4, and the precision trial's norm-wise
 * relative error bound (km.judge.verify's PRECISION_L2). Inputs by the ordinary law
 * (uniform [0, 1), KernelBench's torch.rand) and by its precision law (uniform [-1, 1)).
 *
 *   cc -O2 -o build/precision_law bench/precision_law.c -lm && build/precision_law [bound]
 *
 * Prints one row per K and arithmetic: the elements failing the elementwise tolerance, the
 * worst error / tolerance, the norm-wise relative error, and whether the precision trial
 * passes it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

/* x rounded to a float with `bits` explicit mantissa bits (round to nearest even): 10 for
 * fp16 and TF32, 7 for bf16 (fp16's narrower exponent range is not modelled: the laws here
 * stay inside it). */
static float round_mantissa(float x, int bits) {
  uint32_t u;
  memcpy(&u, &x, 4);
  int drop = 23 - bits;
  uint32_t half = 1u << (drop - 1), mask = (1u << drop) - 1;
  uint32_t rem = u & mask;
  u &= ~mask;
  if (rem > half || (rem == half && (u >> drop & 1))) u += 1u << drop;
  memcpy(&x, &u, 4);
  return x;
}

enum { SEQ, REV, SPLIT8, FP16, TF32, BF16, NKIND };
static const char *kind_name[NKIND] = {"fp32 sequential (reference)", "fp32 reversed", "fp32 8 partial sums",
                                       "fp16 operands", "tf32 operands", "bf16 operands"};

static float dot(const float *a, const float *b, int k, int kind) {
  float acc = 0.f;
  if (kind == REV) {
    for (int i = k - 1; i >= 0; i--) acc = fmaf(a[i], b[i], acc);
  } else if (kind == SPLIT8) {
    float part[8] = {0};
    for (int i = 0; i < k; i++) part[i % 8] = fmaf(a[i], b[i], part[i % 8]);
    for (int j = 0; j < 8; j++) acc += part[j];
  } else {
    int bits = kind == BF16 ? 7 : 10;
    for (int i = 0; i < k; i++) {
      float x = a[i], y = b[i];
      if (kind >= FP16) x = round_mantissa(x, bits), y = round_mantissa(y, bits);
      acc = fmaf(x, y, acc);
    }
  }
  return acc;
}

int main(int argc, char **argv) {
  double bound = argc > 1 ? atof(argv[1]) : 5e-5;
  const int rows = 96, cols = 96;
  const int ks[] = {64, 512, 4096, 16384, 65536};
  printf("%-8s %-6s %-28s %10s %12s %12s %s\n", "law", "K", "arithmetic", "fail/elem", "max err/tol", "rel_l2",
         "precision trial");
  for (int law = 0; law < 2; law++) {
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
      int k = ks[ki];
      float *a = malloc(sizeof(float) * (size_t)rows * k), *b = malloc(sizeof(float) * (size_t)cols * k);
      for (size_t i = 0; i < (size_t)rows * k; i++) a[i] = (float)(law ? 2 * uniform01() - 1 : uniform01());
      for (size_t i = 0; i < (size_t)cols * k; i++) b[i] = (float)(law ? 2 * uniform01() - 1 : uniform01());
      float *ref = malloc(sizeof(float) * rows * cols);
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) ref[r * cols + c] = dot(a + (size_t)r * k, b + (size_t)c * k, k, SEQ);
      for (int kind = REV; kind < NKIND; kind++) {
        long fails = 0;
        double worst = 0, err2 = 0, ref2 = 0;
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++) {
            double want = ref[r * cols + c], got = dot(a + (size_t)r * k, b + (size_t)c * k, k, kind);
            double tol = 1e-4 + 1e-4 * fabs(want), d = fabs(got - want);
            if (d > tol) fails++;
            if (d / tol > worst) worst = d / tol;
            err2 += d * d, ref2 += want * want;
          }
        double rel = sqrt(err2 / ref2);
        printf("%-8s %-6d %-28s %10.4f %12.3g %12.3g %s\n", law ? "[-1,1)" : "[0,1)", k, kind_name[kind],
               (double)fails / (rows * cols), worst, rel, fails == 0 || rel <= bound ? "passes" : "FAILS");
      }
      free(a), free(b), free(ref);
    }
  }
  return 0;
}
