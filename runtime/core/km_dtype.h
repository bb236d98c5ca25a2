/* km_dtype.h — element types of buffers and compares, and host conversions. */
#ifndef KM_DTYPE_H
#define KM_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* km_dtype (KM_F32 ... KM_NDTYPES) is the public header's: one list for the C API and the core. */
#include "kmrun.h"

/* name ("f32"), element size in bytes, whether it is a floating type, numpy descr */
const char *km_dtype_name(km_dtype t);
size_t km_dtype_size(km_dtype t);
int km_dtype_is_float(km_dtype t);
const char *km_dtype_npy(km_dtype t);      /* "<f4", "<f8", "<f2", ... ; NULL for bf16 */
int km_dtype_parse(const char *name);      /* -1 when unknown */

double km_half_to_double(uint16_t h);
uint16_t km_double_to_half(double d);      /* round to nearest even */
double km_bf16_to_double(uint16_t b);
uint16_t km_double_to_bf16(double d);      /* round to nearest even */

/* Element i of a host array as a double, and the reverse (saturating for integers). */
double km_dtype_get(km_dtype t, const void *base, size_t i);
void km_dtype_set(km_dtype t, void *base, size_t i, double v);
/* The bits km.buffer's poison() writes (NaN with a payload for floats, a sentinel for
 * integers); km.compare counts elements still holding them. Defined in km_buffer.c. */
uint64_t km_poison_pattern(km_dtype t);
#endif
