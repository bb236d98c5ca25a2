/* km_nvrtc_core.c — NVRTC compile and the on-disk cache (see km_nvrtc_core.h); the kernel
 * signatures an entry holds come from km_nvrtc_scan_core.c. No lua_State, no mutable
 * globals: every function works on what its caller passes, so compiles can run on several
 * threads at once. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

#include <nvrtc.h>

#include "km.h"
#include "km_nvrtc_core.h"
#include "km_nvrtc_world_core.h"
#include "km_nvrtc_scan_core.h"
#include "km_scrub_core.h"
#include "km_confine_core.h"

#define KM_NVRTC_DEFAULT_ARCH "sm_90"
#define KM_NVRTC_DEFAULT_SM 90

/* ======================================================================================
 * Growable byte buffer: the key material and the cache entry are built in one of these.
 * An allocation failure is remembered and reported once at the end.
 * ==================================================================================== */

typedef struct kbuf {
  char *p;
  size_t len, cap;
  int oom;
} kbuf;

static void kb_put(kbuf *b, const void *data, size_t n) {
  if (b->oom || n == 0) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

/* Fixed little-endian widths so an entry written on one host reads on another. */
static void kb_u32(kbuf *b, uint32_t v) {
  uint8_t x[4];
  for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
  kb_put(b, x, 4);
}

static void kb_u64(kbuf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
  kb_put(b, x, 8);
}

static void kb_blob(kbuf *b, const void *data, size_t n) {
  kb_u64(b, n);
  kb_put(b, data, n);
}

static void kb_str(kbuf *b, const char *s) { kb_blob(b, s, s ? strlen(s) : 0); }

/* Reading side: a cursor that turns any overrun into a sticky `bad` flag. */
typedef struct kcur {
  const uint8_t *p, *end;
  int bad;
} kcur;

static uint64_t kc_uint(kcur *c, int width) {
  if (c->bad || (size_t)(c->end - c->p) < (size_t)width) { c->bad = 1; return 0; }
  uint64_t v = 0;
  for (int i = 0; i < width; i++) v |= (uint64_t)c->p[i] << (8 * i);
  c->p += width;
  return v;
}

static const char *kc_blob(kcur *c, size_t *n) {
  uint64_t len = kc_uint(c, 8);
  if (c->bad || len > (uint64_t)(c->end - c->p)) { c->bad = 1; *n = 0; return NULL; }
  const char *s = (const char *)c->p;
  c->p += len;
  *n = (size_t)len;
  return s;
}

/* A NUL-terminated malloc'd copy of n bytes (a cubin holds NULs: not strndup). */
static char *dupn(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* ======================================================================================
 * Options and the cache key.
 * ==================================================================================== */

static int is_digit(int c) { return c >= '0' && c <= '9'; }

int km_nvrtc_arch_valid(const char *arch) {
  if (!arch) return 0;
  const char *p;
  if (!strncmp(arch, "sm_", 3)) p = arch + 3;
  else if (!strncmp(arch, "compute_", 8)) p = arch + 8;
  else return 0;
  int digits = 0;
  while (is_digit((unsigned char)p[digits])) digits++;
  if (digits < 2 || digits > 3) return 0;
  p += digits;
  if (*p == 'a' || *p == 'f') p++;
  return *p == '\0';
}

void km_nvrtc_default_arch(int major, int minor, char *buf, size_t n) {
  if (major > 0 && minor >= 0) {
    snprintf(buf, n, "sm_%d%d", major, minor);
    if (km_nvrtc_arch_valid(buf)) return;
  }
  snprintf(buf, n, "%s", KM_NVRTC_DEFAULT_ARCH);
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0 || count > 256) return;
  int archs[256];
  if (nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) return;
  int newest = 0;
  for (int i = 0; i < count; i++) {
    if (archs[i] == KM_NVRTC_DEFAULT_SM) return;
    if (archs[i] > newest) newest = archs[i];
  }
  if (newest > 0) snprintf(buf, n, "sm_%d", newest);
}

/* NVRTC ships no C library headers, yet kernels (and models) often include <stdint.h>.
 * When the source names it and the caller gives none, these definitions stand in. */
const char km_nvrtc_builtin_stdint[] =
    "#pragma once\n"
    "typedef signed char int8_t; typedef unsigned char uint8_t;\n"
    "typedef short int16_t; typedef unsigned short uint16_t;\n"
    "typedef int int32_t; typedef unsigned int uint32_t;\n"
    "typedef long long int64_t; typedef unsigned long long uint64_t;\n"
    "typedef long long intptr_t; typedef unsigned long long uintptr_t;\n"
    "#define INT8_MIN (-128)\n#define INT8_MAX 127\n#define UINT8_MAX 255\n"
    "#define INT16_MIN (-32768)\n#define INT16_MAX 32767\n#define UINT16_MAX 65535\n"
    "#define INT32_MIN (-2147483647 - 1)\n#define INT32_MAX 2147483647\n#define UINT32_MAX 4294967295u\n"
    "#define INT64_MIN (-9223372036854775807LL - 1)\n#define INT64_MAX 9223372036854775807LL\n"
    "#define UINT64_MAX 18446744073709551615ULL\n";

static int cmp_define(const void *a, const void *b) {
  const km_nvrtc_define *x = *(const km_nvrtc_define *const *)a, *y = *(const km_nvrtc_define *const *)b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x < y ? -1 : x > y); /* equal names keep the caller's order */
}

static int cmp_header(const void *a, const void *b) {
  const km_nvrtc_header *x = *(const km_nvrtc_header *const *)a, *y = *(const km_nvrtc_header *const *)b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x < y ? -1 : x > y);
}

static int req_check(const km_nvrtc_req *r) {
  if (!r || !r->source || !km_nvrtc_arch_valid(r->arch)) return KM_EINVAL;
  for (size_t i = 0; i < r->ndefines; i++)
    if (!km_nvrtc_is_identifier(r->defines[i].name)) return KM_EINVAL;
  for (size_t i = 0; i < r->nheaders; i++)
    if (!r->headers[i].name || !r->headers[i].source) return KM_EINVAL;
  for (size_t i = 0; i < r->noptions; i++)
    if (!r->options[i]) return KM_EINVAL;
  return 0;
}

int km_nvrtc_include_dir(const km_nvrtc_req *r, char *buf, size_t n) {
  int w;
  if (r->include_dir) w = snprintf(buf, n, "%s", r->include_dir);
  else {
    const char *home = getenv("CUDA_HOME");
    w = snprintf(buf, n, "%s/include", home && *home ? home : "/usr/local/cuda");
  }
  return w < 0 || (size_t)w >= n ? KM_ERANGE : 0;
}

int km_nvrtc_options(const km_nvrtc_req *r, char ***argv_out, size_t *argc_out) {
  *argv_out = NULL;
  *argc_out = 0;
  int rc = req_check(r);
  if (rc) return rc;
  char incdir[4096];
  if ((rc = km_nvrtc_include_dir(r, incdir, sizeof incdir))) return rc;
  const km_nvrtc_define **defs = NULL;
  if (r->ndefines) {
    if (!(defs = malloc(r->ndefines * sizeof *defs))) return KM_ENOMEM;
    for (size_t i = 0; i < r->ndefines; i++) defs[i] = &r->defines[i];
    qsort(defs, r->ndefines, sizeof *defs, cmp_define);
  }
  /* One block: the pointer array, then the strings it points at. */
  /* include/ and include/cccl (where CUDA 13 keeps <cuda/std/...>, CUB and
   * cooperative groups' dependencies) */
  size_t argc = 4 + r->ndefines + r->noptions;
  const char *std = r->std ? r->std : "c++17";
  size_t bytes = argc * sizeof(char *) + strlen(r->arch) + 7 + strlen(std) + 7 + 2 * strlen(incdir) + 3 + 8;
  for (size_t i = 0; i < r->ndefines; i++)
    bytes += strlen(defs[i]->name) + (defs[i]->value ? strlen(defs[i]->value) + 1 : 0) + 3;
  for (size_t i = 0; i < r->noptions; i++) bytes += strlen(r->options[i]) + 1;
  char **argv = malloc(bytes);
  if (!argv) { free(defs); return KM_ENOMEM; }
  char *w = (char *)(argv + argc), *lim = (char *)argv + bytes;
  size_t k = 0;
#define KM_ADDOPT(...) (argv[k++] = w, w += snprintf(w, (size_t)(lim - w), __VA_ARGS__) + 1)
  KM_ADDOPT("-arch=%s", r->arch);
  KM_ADDOPT("--std=%s", std);
  KM_ADDOPT("-I%s", incdir);
  KM_ADDOPT("-I%s/cccl", incdir);
  for (size_t i = 0; i < r->ndefines; i++) {
    if (defs[i]->value) KM_ADDOPT("-D%s=%s", defs[i]->name, defs[i]->value);
    else KM_ADDOPT("-D%s", defs[i]->name);
  }
  for (size_t i = 0; i < r->noptions; i++) KM_ADDOPT("%s", r->options[i]);
#undef KM_ADDOPT
  free(defs);
  *argv_out = argv;
  *argc_out = argc;
  return 0;
}

void km_nvrtc_version(char buf[32]) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) { buf[0] = '\0'; return; }
  snprintf(buf, 32, "%d.%d", major, minor);
}

/* The key over fields that are each length-prefixed (kb_blob), with counts before the
 * variable-length lists, so no two different requests serialise to the same bytes. */
static int key_with(const km_nvrtc_req *r, char *const *argv, size_t argc, char key[KM_SHA256_HEX]) {
  const km_nvrtc_header **hs = NULL;
  if (r->nheaders) {
    if (!(hs = malloc(r->nheaders * sizeof *hs))) return KM_ENOMEM;
    for (size_t i = 0; i < r->nheaders; i++) hs[i] = &r->headers[i];
    qsort(hs, r->nheaders, sizeof *hs, cmp_header);
  }
  char ver[32], num[32];
  km_nvrtc_version(ver);
  kbuf b = {0};
  kb_str(&b, "kmrun.nvrtc.key");
  snprintf(num, sizeof num, "%d", KM_NVRTC_FORMAT);
  kb_str(&b, num);
  kb_str(&b, ver);
  kb_str(&b, r->arch);
  kb_str(&b, r->name ? r->name : "kernel.cu");
  kb_str(&b, r->want_ptx ? "ptx" : "");
  kb_blob(&b, r->source, r->source_len);
  snprintf(num, sizeof num, "%zu", r->nheaders);
  kb_str(&b, num);
  for (size_t i = 0; i < r->nheaders; i++) {
    kb_str(&b, hs[i]->name);
    kb_blob(&b, hs[i]->source, hs[i]->len);
  }
  snprintf(num, sizeof num, "%zu", argc);
  kb_str(&b, num);
  for (size_t i = 0; i < argc; i++) kb_str(&b, argv[i]);
  free(hs);
  if (b.oom) { free(b.p); return KM_ENOMEM; }
  km_sha256_hex(b.p, b.len, key);
  free(b.p);
  return 0;
}

int km_nvrtc_key(const km_nvrtc_req *r, char key[KM_SHA256_HEX]) {
  char **argv;
  size_t argc;
  key[0] = '\0';
  int rc = km_nvrtc_options(r, &argv, &argc);
  if (rc) return rc;
  rc = key_with(r, argv, argc, key);
  free(argv);
  return rc;
}

/* ======================================================================================
 * The cache: <dir>/<key[0:2]>/<key>, holding
 *   magic "KMNVRTC\0" | u32 format | key (64 ASCII) | SHA-256 of payload (32) |
 *   u64 payload length | payload
 *   payload = u32 flags (1 cubin, 2 ptx, 4 compiled confined) | blob cubin | blob ptx | blob log |
 *             u32 nkernels { blob name | u32 nparams { blob name | blob type | blob kind } }
 * Anything that fails to verify is a miss; the caller recompiles and overwrites.
 * ==================================================================================== */

#define KM_ENTRY_MAGIC "KMNVRTC"
#define KM_ENTRY_HEAD (8 + 4 + 64 + 32 + 8)
#define KM_ENTRY_MAX ((size_t)1 << 31) /* a bigger file is not ours */

int km_nvrtc_default_cache_dir(char *buf, size_t n) {
  const char *d = getenv("KM_CACHE_DIR");
  int w;
  if (d && *d) w = snprintf(buf, n, "%s", d);
  else if ((d = getenv("XDG_CACHE_HOME")) && *d) w = snprintf(buf, n, "%s/kmrun/nvrtc", d);
  else if ((d = getenv("HOME")) && *d) w = snprintf(buf, n, "%s/.cache/kmrun/nvrtc", d);
  else { if (n) buf[0] = '\0'; return KM_ENOTFOUND; }
  return w < 0 || (size_t)w >= n ? KM_ERANGE : 0;
}

int km_nvrtc_cache_path(const char *dir, const char *key, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s/%.2s/%s", dir, key, key);
  return w < 0 || (size_t)w >= n ? KM_ERANGE : 0;
}

static void put_payload(kbuf *b, const km_nvrtc_out *o) {
  kb_u32(b, (o->cubin ? 1u : 0u) | (o->ptx ? 2u : 0u) | (o->confined ? 4u : 0u));
  kb_blob(b, o->cubin, o->cubin_len);
  kb_blob(b, o->ptx, o->ptx_len);
  kb_blob(b, o->log, o->log_len);
  kb_u32(b, (uint32_t)o->kernels.n);
  for (size_t i = 0; i < o->kernels.n; i++) {
    const km_nvrtc_kernel *k = &o->kernels.v[i];
    kb_str(b, k->name);
    kb_u32(b, (uint32_t)k->nparams);
    for (size_t j = 0; j < k->nparams; j++) {
      kb_str(b, k->params[j].name);
      kb_str(b, k->params[j].type);
      kb_str(b, k->params[j].kind);
    }
  }
}

/* Fills o from a verified payload; KM_ECORRUPT when it does not parse to the end. */
static int get_payload(const uint8_t *p, size_t n, km_nvrtc_out *o) {
  kcur c = {p, p + n, 0};
  size_t len;
  const char *s;
  uint32_t flags = (uint32_t)kc_uint(&c, 4);
  o->confined = (flags & 4) != 0;
  s = kc_blob(&c, &len);
  if (!c.bad && (flags & 1)) { if (!(o->cubin = dupn(s, len))) return KM_ENOMEM; o->cubin_len = len; }
  s = kc_blob(&c, &len);
  if (!c.bad && (flags & 2)) { if (!(o->ptx = dupn(s, len))) return KM_ENOMEM; o->ptx_len = len; }
  s = kc_blob(&c, &len);
  if (c.bad) return KM_ECORRUPT;
  if (!(o->log = dupn(s, len))) return KM_ENOMEM;
  o->log_len = len;
  uint32_t nk = (uint32_t)kc_uint(&c, 4);
  if (c.bad || nk > n) return KM_ECORRUPT; /* each kernel takes bytes: bounds the calloc */
  if (nk && !(o->kernels.v = calloc(nk, sizeof *o->kernels.v))) return KM_ENOMEM;
  for (uint32_t i = 0; i < nk; i++) {
    km_nvrtc_kernel *k = &o->kernels.v[i];
    o->kernels.n = i + 1;
    s = kc_blob(&c, &len);
    uint32_t np = (uint32_t)kc_uint(&c, 4);
    if (c.bad || np > n) return KM_ECORRUPT;
    if (!(k->name = dupn(s, len))) return KM_ENOMEM;
    if (np && !(k->params = calloc(np, sizeof *k->params))) return KM_ENOMEM;
    for (uint32_t j = 0; j < np; j++) {
      km_nvrtc_param *pa = &k->params[j];
      k->nparams = j + 1;
      size_t nn, tn, kn;
      const char *ns = kc_blob(&c, &nn), *ts = kc_blob(&c, &tn), *ks = kc_blob(&c, &kn);
      if (c.bad) return KM_ECORRUPT;
      pa->name = dupn(ns, nn);
      pa->type = dupn(ts, tn);
      pa->kind = km_nvrtc_intern_kind(ks, kn);
      if (!pa->name || !pa->type) return KM_ENOMEM;
    }
  }
  return c.p == c.end ? 0 : KM_ECORRUPT;
}

/* Drops whatever a failed read left in o, keeping the key. */
static void out_reset(km_nvrtc_out *o) {
  char key[KM_SHA256_HEX];
  memcpy(key, o->key, sizeof key);
  km_nvrtc_out_free(o);
  memset(o, 0, sizeof *o);
  memcpy(o->key, key, sizeof key);
}

static int read_all(int fd, uint8_t *p, size_t n) {
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return KM_EIO;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return KM_EIO;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* 0 and o filled on a verified hit; otherwise a miss with o untouched but for the key. */
static int cache_read(const char *path, km_nvrtc_out *o) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return KM_ENOTFOUND;
  struct stat st;
  uint8_t *buf = NULL;
  int rc = KM_ECORRUPT;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size < KM_ENTRY_HEAD ||
      (size_t)st.st_size > KM_ENTRY_MAX)
    goto done;
  size_t size = (size_t)st.st_size;
  if (!(buf = malloc(size))) { rc = KM_ENOMEM; goto done; }
  if (read_all(fd, buf, size)) goto done;
  kcur c = {buf, buf + size, 0};
  if (memcmp(buf, KM_ENTRY_MAGIC, 8)) goto done;
  c.p += 8;
  if (kc_uint(&c, 4) != KM_NVRTC_FORMAT) goto done;
  if (memcmp(c.p, o->key, 64)) goto done; /* a file renamed into the wrong slot */
  c.p += 64;
  const uint8_t *digest = c.p;
  c.p += 32;
  uint64_t plen = kc_uint(&c, 8);
  if (c.bad || plen != (uint64_t)(c.end - c.p)) goto done;
  uint8_t got[KM_SHA256_SIZE];
  km_sha256(c.p, (size_t)plen, got);
  if (memcmp(got, digest, sizeof got)) goto done;
  rc = get_payload(c.p, (size_t)plen, o);
done:
  close(fd);
  free(buf);
  if (rc) out_reset(o);
  return rc;
}

/* mkdir -p, tolerating directories that already exist (or appear concurrently). */
static int mkdirs(const char *path) {
  char p[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof p) return KM_ERANGE;
  memcpy(p, path, n + 1);
  for (char *s = p + 1; ; s++) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, 0755) && errno != EEXIST) return KM_EIO;
      *s = c;
      if (!c) break;
    }
  }
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : KM_EIO;
}

/* Writes the entry beside its final name and renames it into place, so a reader sees the
 * old entry, no entry, or the whole new one. No fsync: a torn file after a crash fails
 * its digest and is recompiled, which is cheaper than syncing every compile. */
static int cache_write(const char *dir, const char *path, const km_nvrtc_out *o) {
  kbuf pay = {0}, b = {0};
  put_payload(&pay, o);
  if (pay.oom) { free(pay.p); return KM_ENOMEM; }
  uint8_t digest[KM_SHA256_SIZE];
  km_sha256(pay.p, pay.len, digest);
  kb_put(&b, KM_ENTRY_MAGIC, 8); /* with its NUL */
  kb_u32(&b, KM_NVRTC_FORMAT);
  kb_put(&b, o->key, 64);
  kb_put(&b, digest, sizeof digest);
  kb_u64(&b, pay.len);
  kb_put(&b, pay.p, pay.len);
  free(pay.p);
  if (b.oom) { free(b.p); return KM_ENOMEM; }

  char sub[4096], tmp[4200];
  int rc = KM_ERANGE;
  if (snprintf(sub, sizeof sub, "%s/%.2s", dir, o->key) >= (int)sizeof sub) goto out;
  if ((rc = mkdirs(sub))) goto out;
  snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", sub, o->key);
  int fd = mkstemp(tmp);
  if (fd < 0) { rc = KM_EIO; goto out; }
  (void)fchmod(fd, 0644); /* mkstemp makes 0600; a shared cache dir wants readers */
  rc = write_all(fd, b.p, b.len);
  if (close(fd) && !rc) rc = KM_EIO;
  if (!rc && rename(tmp, path)) rc = KM_EIO;
  if (rc) unlink(tmp);
out:
  free(b.p);
  return rc;
}

/* ======================================================================================
 * Compilation.
 * ==================================================================================== */

void km_nvrtc_out_free(km_nvrtc_out *o) {
  if (!o) return;
  free(o->cubin);
  free(o->ptx);
  free(o->log);
  o->cubin = o->ptx = o->log = NULL;
  o->cubin_len = o->ptx_len = o->log_len = 0;
  km_nvrtc_kernels_free(&o->kernels);
}

static const char *describe(nvrtcResult r) {
  switch (r) {
  case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC ran out of memory";
  case NVRTC_ERROR_PROGRAM_CREATION_FAILURE: return "cannot create the program";
  case NVRTC_ERROR_INVALID_INPUT: return "invalid input";
  case NVRTC_ERROR_INVALID_PROGRAM: return "invalid program";
  case NVRTC_ERROR_INVALID_OPTION: return "invalid option";
  case NVRTC_ERROR_COMPILATION: return "compilation failed";
  case NVRTC_ERROR_BUILTIN_OPERATION_FAILURE: return "builtin operation failed";
  case NVRTC_ERROR_INTERNAL_ERROR: return "internal error";
  default: return "NVRTC failed";
  }
}

/* Records an NVRTC failure; `log` (may be NULL) adds its first line to the message. */
static void set_failure(km_nvrtc_out *o, nvrtcResult r, const char *what, const char *log) {
  const char *name = nvrtcGetErrorString(r);
  o->result = r ? (int)r : -1;
  if (!name || strchr(name, ' ')) name = "NVRTC_ERROR_UNKNOWN"; /* "NVRTC_ERROR unknown" */
  snprintf(o->code, sizeof o->code, "%s", name);
  int n = snprintf(o->message, sizeof o->message, "%s: %s%s%s", o->code, describe(r),
                   what ? ": " : "", what ? what : "");
  if (log && *log && n > 0 && (size_t)n < sizeof o->message) {
    size_t line = strcspn(log, "\n");
    snprintf(o->message + n, sizeof o->message - (size_t)n, ": %.*s", (int)line, log);
  }
}

/* Copies NVRTC's result into o. prog is destroyed by the caller on every path. */
static int fetch(nvrtcProgram prog, int is_virtual, int want_ptx, km_nvrtc_out *o) {
  nvrtcResult r;
  size_t n = 0;
  if (!is_virtual) {
    if ((r = nvrtcGetCUBINSize(prog, &n))) { set_failure(o, r, "nvrtcGetCUBINSize", NULL); return 0; }
    if (!(o->cubin = malloc(n ? n : 1))) return KM_ENOMEM;
    if ((r = nvrtcGetCUBIN(prog, o->cubin))) { set_failure(o, r, "nvrtcGetCUBIN", NULL); return 0; }
    o->cubin_len = n;
  }
  if (is_virtual || want_ptx) {
    if ((r = nvrtcGetPTXSize(prog, &n))) { set_failure(o, r, "nvrtcGetPTXSize", NULL); return 0; }
    if (!(o->ptx = malloc(n + 1))) return KM_ENOMEM;
    o->ptx[0] = o->ptx[n] = '\0';
    if ((r = nvrtcGetPTX(prog, o->ptx))) { set_failure(o, r, "nvrtcGetPTX", NULL); return 0; }
    o->ptx_len = strlen(o->ptx); /* the size counts the trailing NUL */
  }
  return 0;
}

/* ---- the closed world below the preprocessor (km_confine_core.h) ----
 * nvrtcCompileProgram runs on a thread that can read only the toolkit's include tree, so
 * whatever names a file — a macro-named include in a toolkit header, __has_include,
 * #include_next — can open nothing else: the log can never quote a host file, and
 * __has_include of one answers no. NVRTC loads libnvrtc-builtins on its first compile, so
 * one fixed source is compiled unconfined first, once per process. Where the kernel has no
 * Landlock, compiles run unconfined (only the include check above guards them) and
 * out->confined is 0; KM_REQUIRE_CONFINED=1 refuses them instead. */
static pthread_once_t warm_once = PTHREAD_ONCE_INIT;
static void warm_nvrtc(void) {
  nvrtcProgram p = NULL;
  if (nvrtcCreateProgram(&p, "extern \"C\" __global__ void km_warm(void) {}\n", "km_warm.cu", 0, NULL, NULL))
    return;
  nvrtcCompileProgram(p, 0, NULL);
  nvrtcDestroyProgram(&p);
}

typedef struct compile_job {
  nvrtcProgram prog;
  char *const *argv;
  size_t argc;
  nvrtcResult res;
} compile_job;

static void compile_job_run(void *p) {
  compile_job *j = p;
  j->res = nvrtcCompileProgram(j->prog, (int)j->argc, (const char *const *)j->argv);
}

int km_nvrtc_confinement(const char **why) { return km_confine_abi(why) > 0; }

/* -> NVRTC's result, or (nvrtcResult)-1 with o filled when the compile was refused. */
static nvrtcResult compile_confined(const km_nvrtc_req *r, nvrtcProgram prog, char *const *argv,
                                    size_t argc, km_nvrtc_out *o) {
  compile_job j = {prog, argv, argc, NVRTC_SUCCESS};
  const char *why = NULL;
  if (!km_confine_abi(&why)) {
    const char *req = getenv("KM_REQUIRE_CONFINED");
    if (req && *req && strcmp(req, "0")) goto refuse;
    compile_job_run(&j);
    return j.res;
  }
  char inc[4096];
  if (km_nvrtc_include_dir(r, inc, sizeof inc)) { why = "the include folder's name is too long"; goto refuse; }
  pthread_once(&warm_once, warm_nvrtc);
  const char *dirs[] = {inc};
  if (km_confine_run(dirs, 1, compile_job_run, &j, &why)) goto refuse;
  o->confined = 1;
  return j.res;
refuse:
  o->result = KM_NVRTC_REFUSED;
  snprintf(o->code, sizeof o->code, "%s", "UNCONFINED");
  snprintf(o->message, sizeof o->message, "UNCONFINED: the compile could not be confined to the toolkit's headers (%s)", why);
  return (nvrtcResult)-1;
}

/* NVRTC says why a file could not be opened ("cannot open source file "/etc/x": Permission
 * denied"): under confinement that tells which host files exist. The reason is cut, so a
 * file outside the world reads the same whether or not it exists. */
static void cut_open_reasons(char *log, size_t *len) {
  static const char pat[] = "cannot open source file \"";
  char *w = log, *r = log, *end = log + *len;
  while (r < end) {
    char *hit = strstr(r, pat);
    if (!hit) { memmove(w, r, (size_t)(end - r)); w += end - r; break; }
    char *q = strchr(hit + sizeof pat - 1, '"');
    char *stop = q ? q + 1 : end;
    memmove(w, r, (size_t)(stop - r));
    w += stop - r;
    r = stop;
    if (q && *r == ':') r += strcspn(r, "\n"); /* ": Permission denied" up to the line's end */
  }
  *w = '\0';
  *len = (size_t)(w - log);
}

static int run_nvrtc(const km_nvrtc_req *r, char *const *argv, size_t argc, km_nvrtc_out *o) {
  const char **hnames = NULL, **hsrcs = NULL;
  if (r->nheaders) {
    hnames = malloc(r->nheaders * sizeof *hnames);
    hsrcs = malloc(r->nheaders * sizeof *hsrcs);
    if (!hnames || !hsrcs) { free(hnames); free(hsrcs); return KM_ENOMEM; }
    for (size_t i = 0; i < r->nheaders; i++) {
      hnames[i] = r->headers[i].name;
      hsrcs[i] = r->headers[i].source;
    }
  }
  nvrtcProgram prog = NULL;
  nvrtcResult res = nvrtcCreateProgram(&prog, r->source, r->name ? r->name : "kernel.cu",
                                       (int)r->nheaders, hsrcs, hnames);
  free(hnames);
  free(hsrcs);
  if (res) { set_failure(o, res, "nvrtcCreateProgram", NULL); return 0; }

  int rc = 0;
  res = compile_confined(r, prog, argv, argc, o);
  if (res == (nvrtcResult)-1) goto done; /* refused: o says why */
  size_t n = 0;
  nvrtcResult lr = nvrtcGetProgramLogSize(prog, &n);
  if (!(o->log = malloc(n + 1))) { rc = KM_ENOMEM; goto done; }
  o->log[0] = o->log[n] = '\0';
  if (lr == NVRTC_SUCCESS && n > 0 && nvrtcGetProgramLog(prog, o->log) != NVRTC_SUCCESS) o->log[0] = '\0';
  o->log_len = strlen(o->log);
  cut_open_reasons(o->log, &o->log_len);
  if (res) { set_failure(o, res, NULL, res == NVRTC_ERROR_COMPILATION ? NULL : o->log); goto done; }
  rc = fetch(prog, !strncmp(r->arch, "compute_", 8), r->want_ptx, o);
done:
  nvrtcDestroyProgram(&prog);
  return rc;
}

/* Replaces the process's secrets in o's log (km_scrub_core.h): NVRTC quotes the lines it
 * complains about, and whatever it read ends up in verdicts, stores and prompts. */
static int scrub_log(km_nvrtc_out *o) {
  char *clean;
  size_t n;
  int rc = km_scrub(o->message, strlen(o->message), &clean, &n, NULL); /* may quote the log */
  if (rc) return rc;
  if (clean) snprintf(o->message, sizeof o->message, "%s", clean);
  free(clean);
  if (!o->log) return 0;
  if ((rc = km_scrub(o->log, o->log_len, &clean, &n, NULL)) || !clean) return rc;
  free(o->log);
  o->log = clean;
  o->log_len = n;
  return 0;
}

/* Checks the source and every header against the closed world; a refusal fills o. */
static int closed_world(const km_nvrtc_req *r, km_nvrtc_out *o) {
  char inc[4096], cccl[4200];
  int rc = km_nvrtc_include_dir(r, inc, sizeof inc);
  if (rc) return rc;
  snprintf(cccl, sizeof cccl, "%s/cccl", inc);
  const char *dirs[] = {inc, cccl};
  km_nvrtc_world w = {dirs, 2, r->headers, r->nheaders};
  rc = km_nvrtc_check_includes(r->source, r->source_len, r->name ? r->name : "kernel.cu", &w,
                               o->message, sizeof o->message);
  for (size_t i = 0; i < r->nheaders && !rc; i++)
    rc = km_nvrtc_check_includes(r->headers[i].source, r->headers[i].len, r->headers[i].name, &w,
                                 o->message, sizeof o->message);
  if (rc != KM_EREFUSED) return rc;
  o->result = KM_NVRTC_REFUSED;
  snprintf(o->code, sizeof o->code, "%s", KM_NVRTC_REFUSED_CODE);
  if (!(o->log = dupn(o->message, strlen(o->message)))) return KM_ENOMEM;
  o->log_len = strlen(o->log);
  return 0;
}

int km_nvrtc_compile_c(const km_nvrtc_req *r, km_nvrtc_out *o) {
  memset(o, 0, sizeof *o);
  char **argv = NULL;
  size_t argc = 0;
  int rc = km_nvrtc_options(r, &argv, &argc);
  if (!rc) rc = key_with(r, argv, argc, o->key);
  if (rc) goto out;

  if ((rc = closed_world(r, o)) || o->result) goto out;

  char path[4200];
  int use_cache = r->cache_dir && *r->cache_dir &&
                  !km_nvrtc_cache_path(r->cache_dir, o->key, path, sizeof path);
  if (use_cache) {
    int hit = cache_read(path, o);
    if (hit == KM_ENOMEM) { rc = hit; goto out; }
    if (hit == 0) { o->cached = 1; rc = scrub_log(o); goto out; } /* written before a key was known */
  }

  rc = run_nvrtc(r, argv, argc, o);
  if (!rc) rc = scrub_log(o);
  if (rc || o->result) goto out;
  if ((rc = km_nvrtc_parse_kernels(r->source, r->source_len, &o->kernels))) goto out;
  if (use_cache) o->cache_status = cache_write(r->cache_dir, path, o);
out:
  free(argv);
  return rc;
}
