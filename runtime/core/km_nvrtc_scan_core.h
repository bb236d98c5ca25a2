/* km_nvrtc_scan_core.h — the scanner for `extern "C" __global__` kernel signatures: each
 * kernel's name and its parameters' names, type text and kinds, read from CUDA C++ source
 * without compiling it. Pure C: nothing here touches a lua_State or writes a global.
 *
 * Ownership: a km_nvrtc_kernels owns every string in it (a kind is static and owned by no
 * one) and is released by km_nvrtc_kernels_free, which is idempotent. What the scanner
 * returns is stored in NVRTC cache entries: a change to it bumps KM_NVRTC_FORMAT
 * (km_nvrtc_core.h). */
#ifndef KM_NVRTC_SCAN_CORE_H
#define KM_NVRTC_SCAN_CORE_H
#include <stddef.h>

typedef struct km_nvrtc_param {
  char *name;       /* "" for an unnamed parameter */
  char *type;       /* declared type, whitespace-normalised: "const float *" */
  const char *kind; /* static: "ptr", "f32", "f64", "f16", "bf16", "i8".."u64", "unknown" */
} km_nvrtc_param;

typedef struct km_nvrtc_kernel {
  char *name;
  km_nvrtc_param *params;
  size_t nparams;
} km_nvrtc_kernel;

typedef struct km_nvrtc_kernels {
  km_nvrtc_kernel *v; /* in order of first appearance; a redeclared name keeps the last */
  size_t n;
} km_nvrtc_kernels;

/* Finds every `extern "C" __global__` function in src (len bytes, need not be
 * NUL-terminated). Returns 0 or KM_ENOMEM; *out is then filled or empty. */
int km_nvrtc_parse_kernels(const char *src, size_t len, km_nvrtc_kernels *out);
void km_nvrtc_kernels_free(km_nvrtc_kernels *k);

/* The kind of a parameter from its type text ("const float *" -> "ptr"). */
const char *km_nvrtc_kind(const char *type);

/* The static kind string equal to the n bytes at s (a kind read back from a cache entry),
 * "unknown" when there is none. */
const char *km_nvrtc_intern_kind(const char *s, size_t n);

/* 1 when s is a whole C identifier as the scanner reads one ([A-Za-z_][A-Za-z0-9_]*). */
int km_nvrtc_is_identifier(const char *s);
#endif
