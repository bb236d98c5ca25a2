/* km_dtype_core.c — element types: names, sizes, and host conversions (fp16/bf16 by hand,
 * so the host side needs no CUDA headers). */
#include <math.h>
#include "km_dtype.h"

static const struct {
  const char *name, *npy;
  size_t size;
  int is_float;
} types[KM_NDTYPES] = {
    [KM_F32] = {"f32", "<f4", 4, 1}, [KM_F64] = {"f64", "<f8", 8, 1},
    [KM_F16] = {"f16", "<f2", 2, 1}, [KM_BF16] = {"bf16", NULL, 2, 1},
    [KM_I8] = {"i8", "|i1", 1, 0},   [KM_I32] = {"i32", "<i4", 4, 0},
    [KM_I64] = {"i64", "<i8", 8, 0}, [KM_U8] = {"u8", "|u1", 1, 0},
};

const char *km_dtype_name(km_dtype t) { return (unsigned)t < KM_NDTYPES ? types[t].name : "?"; }
size_t km_dtype_size(km_dtype t) { return (unsigned)t < KM_NDTYPES ? types[t].size : 0; }
int km_dtype_is_float(km_dtype t) { return (unsigned)t < KM_NDTYPES && types[t].is_float; }
const char *km_dtype_npy(km_dtype t) { return (unsigned)t < KM_NDTYPES ? types[t].npy : NULL; }

int km_dtype_parse(const char *name) {
  for (int i = 0; i < KM_NDTYPES; i++)
    if (!strcmp(name, types[i].name)) return i;
  return -1;
}

/* The poison a buffer is filled with: NaN for floats (a payload no arithmetic produces), a
 * sentinel for ints, so an output element a kernel never wrote cannot pass a compare by luck. */
uint64_t km_poison_pattern(km_dtype dt) {
  switch (dt) {
  case KM_F32: return 0x7fc0dead;
  case KM_F64: return 0x7ff8deaddeadbeefull;
  case KM_F16: return 0x7e5a;
  case KM_BF16: return 0x7fda;
  case KM_I8: case KM_U8: return 0x5a;
  case KM_I32: return 0x5adeadbe;
  case KM_I64: return 0x5adeadbeefdeadbeull;
  default: return 0;
  }
}


/* ---- IEEE half and bfloat16 ---- */

double km_half_to_double(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) v = ldexp(man, -24);                      /* subnormal */
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = ldexp(man | 0x400, exp - 25);
  return sign ? -v : v;
}

uint16_t km_double_to_half(double d) {
  /* Go through float's bits, rounding to nearest even at the 10-bit mantissa. */
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t absx = x & 0x7fffffff;
  if (absx > 0x7f800000) return sign | 0x7e00;               /* NaN */
  if (absx >= 0x477ff000) return sign | 0x7c00;              /* overflow to Inf */
  if (absx < 0x38800000) {                                   /* subnormal or zero */
    if (absx < 0x33000000) return sign;                      /* rounds to 0 */
    int e = (int)(absx >> 23);
    uint32_t m = (absx & 0x7fffff) | 0x800000;
    int shift = 126 - e;                                     /* 14 + (113 - e) - 1 */
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    uint32_t r = m >> shift;
    if (rem > half || (rem == half && (r & 1))) r++;
    return sign | (uint16_t)r;
  }
  uint32_t r = ((absx - 0x38000000) >> 13);
  uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return sign | (uint16_t)r;
}

double km_bf16_to_double(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t km_double_to_bf16(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* ---- element access ---- */

double km_dtype_get(km_dtype t, const void *base, size_t i) {
  const unsigned char *p = (const unsigned char *)base + i * km_dtype_size(t);
  switch (t) {
  case KM_F32: { float v; memcpy(&v, p, 4); return v; }
  case KM_F64: { double v; memcpy(&v, p, 8); return v; }
  case KM_F16: { uint16_t v; memcpy(&v, p, 2); return km_half_to_double(v); }
  case KM_BF16: { uint16_t v; memcpy(&v, p, 2); return km_bf16_to_double(v); }
  case KM_I8: return (int8_t)*p;
  case KM_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  case KM_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  case KM_U8: return *p;
  default: return NAN;
  }
}

static double clampd(double v, double lo, double hi) {
  if (v != v) return 0;
  return v < lo ? lo : v > hi ? hi : v;
}

void km_dtype_set(km_dtype t, void *base, size_t i, double v) {
  unsigned char *p = (unsigned char *)base + i * km_dtype_size(t);
  switch (t) {
  case KM_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
  case KM_F64: memcpy(p, &v, 8); break;
  case KM_F16: { uint16_t h = km_double_to_half(v); memcpy(p, &h, 2); break; }
  case KM_BF16: { uint16_t h = km_double_to_bf16(v); memcpy(p, &h, 2); break; }
  case KM_I8: *(int8_t *)p = (int8_t)clampd(v, -128, 127); break;
  case KM_I32: { int32_t x = (int32_t)clampd(v, -2147483648.0, 2147483647.0); memcpy(p, &x, 4); break; }
  case KM_I64: { int64_t x = (int64_t)clampd(v, -9223372036854775808.0, 9223372036854774784.0); memcpy(p, &x, 8); break; }
  case KM_U8: *p = (uint8_t)clampd(v, 0, 255); break;
  default: break;
  }
}
