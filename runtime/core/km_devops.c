/* km_devops.c — device work in plain C (km_devops.h): the one implementation behind
 * km.buffer, km.compare and the public C API. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <stddef.h>
#include <string.h>

#include "km.h"
#include "km_driver.h"
#include "km_devops.h"
#include "km_hash_core.h"

/* ==== buffers ==== */

int km_devbuf_init(km_devbuf *b, km_dtype dt, const int64_t *shape, int ndim, size_t guard,
                   const char **why) {
  memset(b, 0, sizeof *b);
  b->dtype = dt;
  if ((int)dt < 0 || dt >= KM_NDTYPES) { *why = "unknown dtype"; return -1; }
  if (ndim < 0 || ndim > KM_MAXDIM) { *why = "more than 8 dimensions"; return -1; }
  b->ndim = ndim;
  b->numel = 1;
  for (int i = 0; i < ndim; i++) {
    b->shape[i] = shape[i];
    if (shape[i] < 0) { *why = "negative dimension"; return -1; }
    if (shape[i] && b->numel > INT64_MAX / shape[i] / 8) { *why = "shape too large"; return -1; }
    b->numel *= shape[i];
  }
  b->bytes = (size_t)b->numel * km_dtype_size(dt);
  guard = (guard + 255) & ~(size_t)255;
  b->guard = guard;
  size_t padded = (b->bytes + 255) & ~(size_t)255;
  b->alloc = guard + padded + guard;
  if (b->alloc == 0) b->alloc = 256;
  return 0;
}

/* Live buffers in this process (km_devbuf_live): the test that every evaluation gives back
 * what its candidate obtained counts them; and the most bytes live at once since the last
 * km_devbuf_reset_peak (an evaluation's peak of the judge's own device memory). */
static _Atomic long long live_count, live_bytes, peak_bytes;

/* peak_bytes raised to at least `now` (a compare-and-swap loop: allocations may race). */
static void raise_peak(long long now) {
  long long seen = peak_bytes;
  while (now > seen && !atomic_compare_exchange_weak(&peak_bytes, &seen, now)) {
  }
}

CUresult km_devbuf_alloc(km_devbuf *b) {
  CUdeviceptr base;
  CUresult r = km_cu->cuMemAlloc(&base, b->alloc);
  if (r != CUDA_SUCCESS) return r;
  b->base = base;
  b->ptr = base + b->guard;
  live_count++;
  raise_peak(live_bytes += (long long)b->alloc);
  return km_devbuf_reset_guards(b);
}

void km_devbuf_free(km_devbuf *b) {
  if (b->base) {
    if (km_cu) km_cu->cuMemFree(b->base);
    live_count--;
    live_bytes -= (long long)b->alloc;
  }
  b->base = b->ptr = 0;
}

void km_devbuf_live(long long *count, long long *bytes) {
  *count = live_count;
  *bytes = live_bytes;
}

long long km_devbuf_peak(void) { return peak_bytes; }

void km_devbuf_reset_peak(void) { peak_bytes = live_bytes; }

CUresult km_devbuf_reset_guards(km_devbuf *b) {
  if (!b->guard) return CUDA_SUCCESS;
  CUresult r = km_cu->cuMemsetD8(b->base, KM_GUARD_BYTE, b->guard);
  if (r == CUDA_SUCCESS) r = km_cu->cuMemsetD8(b->ptr + b->bytes, KM_GUARD_BYTE, b->alloc - b->guard - b->bytes);
  return r;
}

CUresult km_devbuf_fill_pattern(const km_devbuf *b, uint64_t pattern, CUstream s) {
  size_t es = km_dtype_size(b->dtype), n = (size_t)b->numel;
  if (!n) return CUDA_SUCCESS;
  switch (es) {
  case 1: return km_cu->cuMemsetD8Async(b->ptr, (unsigned char)pattern, n, s);
  case 2: return km_cu->cuMemsetD16Async(b->ptr, (unsigned short)pattern, n, s);
  case 4: return km_cu->cuMemsetD32Async(b->ptr, (unsigned int)pattern, n, s);
  default: {
    CUfunction fn;
    CUresult r = km_cuda_util_get("km_fill64", &fn);
    if (r != CUDA_SUCCESS) return r;
    uint64_t nn = n;
    CUdeviceptr p = b->ptr;
    void *args[] = {&p, &nn, &pattern};
    return km_cuda_util_launch(fn, n, s, args);
  }
  }
}

uint64_t km_devbuf_pattern(km_dtype dt, double v) {
  unsigned char tmp[8] = {0};
  km_dtype_set(dt, tmp, 0, v);
  uint64_t p = 0;
  memcpy(&p, tmp, km_dtype_size(dt));
  return p;
}

CUresult km_devbuf_random(const km_devbuf *b, int dist, double a, double c, uint64_t seed, CUstream s) {
  if (!b->numel) return CUDA_SUCCESS;
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_random", &fn);
  if (r != CUDA_SUCCESS) return r;
  int dt = (int)b->dtype;
  uint64_t n = (uint64_t)b->numel;
  CUdeviceptr p = b->ptr;
  void *args[] = {&p, &dt, &n, &seed, &dist, &a, &c};
  return km_cuda_util_launch(fn, n, s, args);
}

CUresult km_devbuf_poison_sparse(const km_devbuf *b, uint64_t seed, CUstream s) {
  uint64_t pattern = km_poison_pattern(b->dtype);
  if (b->bytes < KM_SPARSE_POISON_MIN) return km_devbuf_fill_pattern(b, pattern, s);
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_poison_sparse", &fn);
  if (r != CUDA_SUCCESS) return r;
  size_t es = km_dtype_size(b->dtype);
  uint64_t pat8 = 0;
  for (size_t k = 0; k < 8; k += es) pat8 |= (es == 8 ? pattern : pattern & ((1ull << (8 * es)) - 1)) << (8 * k);
  uint64_t bytes = (uint64_t)b->bytes;
  CUdeviceptr p = b->ptr;
  void *args[] = {&p, &bytes, &pat8, &seed};
  return km_cuda_util_launch(fn, (bytes + 4095) / 4096 * 8, s, args); /* 8 threads a line */
}

/* ---- digests ----
 * Keyed by a per-process random key (getrandom), so a kernel cannot forge a digest; values
 * compare only within one process. The accumulators live in one device array kept per
 * context (grown, never freed while the context lives), so a digest allocates nothing:
 * cuMemFree synchronizes the device, and digests run in the judge's inner loop. */
static pthread_mutex_t dg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dg_once = PTHREAD_ONCE_INIT;
static uint64_t dg_key;
static CUdeviceptr dg_acc;
static size_t dg_cap;
static CUcontext dg_ctx;

static void dg_init(void) {
  uint64_t k = 0;
  if (km_random_bytes(&k, sizeof k) != 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    k = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_sec;
  }
  dg_key = k | 1;
}

/* The accumulator array (dg_lock held): at least n zeroed 8-byte slots, allocated once per
 * context and grown, never freed while the context lives (a cuMemFree waits for the device). */
static CUresult acc_zeroed(size_t n, CUstream s) {
  CUcontext ctx = NULL;
  km_cu->cuCtxGetCurrent(&ctx);
  if (ctx != dg_ctx) dg_acc = 0, dg_cap = 0; /* another context: the old array went with it */
  if (dg_cap < n) {
    size_t cap = n < 64 ? 64 : n;
    CUdeviceptr p;
    CUresult r = km_cu->cuMemAlloc(&p, cap * 8);
    if (r != CUDA_SUCCESS) return r;
    if (dg_acc) km_cu->cuMemFree(dg_acc);
    dg_acc = p, dg_cap = cap, dg_ctx = ctx;
  }
  return km_cu->cuMemsetD8Async(dg_acc, 0, n * 8, s);
}

/* The key on the device: never a kernel argument (the driver writes those into memory a
 * later kernel can find near its own parameters: tests/gpu/test_trust5_secrets.lua), but a
 * device slot (the key, then a count of blocks done) the key is copied into right before a
 * batch of digests and zeroed by the batch's last launch once all its blocks have read it
 * (km_checksum), both in stream order on the digests' stream, so no kernel enqueued before
 * or after them meets it there; one copy a batch, no memset. Its source is page-locked host
 * memory (the copy is asynchronous: no wait), mapped into the device at an address nothing
 * hands a kernel. Made once per context (key_lock: ACC_READ's callers hold dg_lock). */
static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr key_dev;
static uint64_t *key_host;
static CUcontext key_ctx;

static CUresult key_slot(void) {
  CUcontext ctx = NULL;
  km_cu->cuCtxGetCurrent(&ctx);
  pthread_mutex_lock(&key_lock);
  CUresult r = CUDA_SUCCESS;
  if (ctx != key_ctx) key_dev = 0, key_host = NULL; /* another context: the old went with it */
  if (!key_dev) {
    void *h = NULL;
    CUdeviceptr p = 0;
    r = km_cu->cuMemAllocHost(&h, 8);
    if (r == CUDA_SUCCESS && (r = km_cu->cuMemAlloc(&p, 16)) != CUDA_SUCCESS) km_cu->cuMemFreeHost(h);
    if (r == CUDA_SUCCESS && (r = km_cu->cuMemsetD8(p, 0, 16)) != CUDA_SUCCESS) km_cu->cuMemFree(p), km_cu->cuMemFreeHost(h);
    if (r == CUDA_SUCCESS) {
      *(uint64_t *)h = dg_key;
      key_host = h, key_dev = p, key_ctx = ctx;
    }
  }
  pthread_mutex_unlock(&key_lock);
  return r;
}

/* ---- checks into slots: each op adds into 8-byte slots at `acc` that the caller zeroed
 * (a km.buffer ledger zeroes a batch's slots at its begin, in one memset; the plain forms'
 * acc_zeroed) and enqueues its kernels, with no wait (the *_at forms); the plain forms use
 * the shared accumulator array, copy the slots back and wait for the stream. One memset a
 * batch, not one or two an op: each is a few microseconds of the GPU's timeline, about 45 a
 * timing (bench/RESULTS.md, "one-memset"). */

CUresult km_devbuf_random_check_at(const km_devbuf *b, int dist, double a, double c, uint64_t seed, CUstream s,
                                   CUdeviceptr acc, const km_lines *smp) {
  if (!b->numel) return CUDA_SUCCESS;
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_random_check", &fn);
  if (r != CUDA_SUCCESS) return r;
  int dt = (int)b->dtype;
  uint64_t n = (uint64_t)b->numel, skey = smp ? smp->key : 0, lbytes = smp ? smp->bytes : 0;
  unsigned shift = smp ? km_lines_used_shift(smp, b->bytes) : 0;
  CUdeviceptr p = b->ptr;
  void *args[] = {&p, &dt, &n, &seed, &dist, &a, &c, &acc, &skey, &shift, &lbytes};
  return km_cuda_util_launch(fn, (n >> shift) / 4 + 1, s, args);
}

CUresult km_devlines_copy(CUdeviceptr full, CUdeviceptr compact, uint64_t bytes, const km_lines *l, int scatter,
                          CUstream s) {
  if (!bytes) return CUDA_SUCCESS;
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_lines_copy", &fn);
  if (r != CUDA_SUCCESS) return r;
  uint64_t lbytes = l->bytes ? l->bytes : 128, key = l->key;
  unsigned shift = km_lines_used_shift(l, bytes);
  void *args[] = {&full, &compact, &bytes, &lbytes, &key, &shift, &scatter};
  return km_cuda_util_launch(fn, ((bytes >> shift) + 15) / 16 + 1, s, args);
}

CUresult km_devbuf_perturb_at(const km_devbuf *b, CUdeviceptr src, uint64_t key, CUstream s, CUdeviceptr acc) {
  if (!b->numel) return CUDA_SUCCESS;
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_perturb", &fn);
  if (r != CUDA_SUCCESS) return r;
  int dt = (int)b->dtype;
  uint64_t n = (uint64_t)b->numel;
  CUdeviceptr p = b->ptr;
  void *args[] = {&p, &src, &dt, &n, &key, &acc};
  return km_cuda_util_launch(fn, n, s, args);
}

/* Must match struct guard_batch in runtime/kernels/km_util.cu. */
#define KM_GUARD_BATCH 16
typedef struct {
  unsigned long long head[KM_GUARD_BATCH], tail[KM_GUARD_BATCH];
  unsigned head_len[KM_GUARD_BATCH], tail_len[KM_GUARD_BATCH], slot[KM_GUARD_BATCH];
} km_guard_batch;

/* km_guards over bs in launches of KM_GUARD_BATCH (buffers without guards, or freed, left
 * out): fill = 0 counts into acc's slot i for buffer i, fill = 1 writes the pattern. */
static CUresult guards_batched(const km_devbuf *const *bs, size_t n, CUstream s, int fill, CUdeviceptr acc) {
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_guards", &fn);
  if (r != CUDA_SUCCESS || n == 0) return r;
  km_guard_batch g;
  unsigned k = 0, longest = 0, pat = KM_GUARD_BYTE;
  for (size_t i = 0; i <= n && r == CUDA_SUCCESS; i++) {
    if (i < n) {
      const km_devbuf *b = bs[i];
      if (!b->guard || !b->base) continue;
      g.head[k] = b->base, g.tail[k] = b->ptr + b->bytes;
      g.head_len[k] = (unsigned)b->guard, g.tail_len[k] = (unsigned)(b->alloc - b->guard - b->bytes);
      g.slot[k] = (unsigned)i;
      if (g.head_len[k] + g.tail_len[k] > longest) longest = g.head_len[k] + g.tail_len[k];
      if (++k < KM_GUARD_BATCH) continue;
    }
    if (!k) break;
    unsigned blocks = (longest + 1023) / 1024; /* 4 bytes a thread */
    if (blocks > 64) blocks = 64;
    int f = fill;
    void *args[] = {&g, &pat, &f, &acc};
    r = km_cu->cuLaunchKernel(fn, blocks ? blocks : 1, k, 1, 256, 1, 1, 0, s, args, NULL);
    k = longest = 0;
  }
  return r;
}

CUresult km_devbufs_guards_at(const km_devbuf *const *bs, size_t n, CUstream s, CUdeviceptr acc) {
  return guards_batched(bs, n, s, 0, acc);
}

CUresult km_devbufs_reset_guards(const km_devbuf *const *bs, size_t n, CUstream s) {
  return guards_batched(bs, n, s, 1, 0);
}

CUresult km_dev_digest_at(const CUdeviceptr *ptrs, const uint64_t *bytes, size_t n, CUstream s, CUdeviceptr acc) {
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_checksum", &fn);
  if (r != CUDA_SUCCESS || n == 0) return r;
  pthread_once(&dg_once, dg_init);
  if ((r = key_slot()) != CUDA_SUCCESS) return r;
  CUdeviceptr keyp = key_dev;
  r = km_cu->cuMemcpyHtoDAsync(keyp, key_host, 8, s);
  for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
    CUdeviceptr p = ptrs[i], slot = acc + 8 * i;
    uint64_t nb = bytes[i];
    int last = i == n - 1;
    void *args[] = {&p, &nb, &keyp, &slot, &last};
    r = km_cuda_util_launch(fn, nb / 8 + 1, s, args);
  }
  if (r != CUDA_SUCCESS) km_cu->cuMemsetD8Async(keyp, 0, 16, s); /* no last launch ran: zeroed here */
  return r;
}

/* The shared array's n slots: op(slots) enqueued, copied back into out, one wait. */
#define ACC_READ(n, out, s, call)                                                      \
  do {                                                                                 \
    pthread_mutex_lock(&dg_lock);                                                      \
    CUresult r_ = acc_zeroed((n), (s));                                                \
    if (r_ == CUDA_SUCCESS) { CUdeviceptr acc = dg_acc; r_ = (call); }                 \
    if (r_ == CUDA_SUCCESS) r_ = km_cu->cuMemcpyDtoHAsync((out), dg_acc, (n) * 8, (s)); \
    if (r_ == CUDA_SUCCESS) r_ = km_cu->cuStreamSynchronize(s);                        \
    pthread_mutex_unlock(&dg_lock);                                                    \
    return r_;                                                                         \
  } while (0)

CUresult km_devbuf_random_check(const km_devbuf *b, int dist, double a, double c, uint64_t seed, CUstream s,
                                uint64_t *bad) {
  *bad = 0;
  if (!b->numel) return CUDA_SUCCESS;
  ACC_READ(1, bad, s, km_devbuf_random_check_at(b, dist, a, c, seed, s, acc, NULL));
}

CUresult km_devbufs_guards(const km_devbuf *const *bs, size_t n, CUstream s, uint64_t *bad) {
  if (n == 0) return CUDA_SUCCESS;
  ACC_READ(n, bad, s, km_devbufs_guards_at(bs, n, s, acc));
}

CUresult km_dev_digest(const CUdeviceptr *ptrs, const uint64_t *bytes, size_t n, CUstream s, uint64_t *out) {
  if (n == 0) return CUDA_SUCCESS;
  ACC_READ(n, out, s, km_dev_digest_at(ptrs, bytes, n, s, acc));
}

CUresult km_devbuf_checksum(const km_devbuf *b, CUstream s, uint64_t *out) {
  *out = 0;
  uint64_t nb = b->bytes;
  return km_dev_digest(&b->ptr, &nb, 1, s, out);
}

CUresult km_devbuf_check_guards(const km_devbuf *b, int *ok, int *side, size_t *count, size_t *offset) {
  *ok = 1;
  *side = 0;
  *count = *offset = 0;
  if (!b->guard) return CUDA_SUCCESS;
  size_t tail = b->alloc - b->guard - b->bytes;
  unsigned char *p = malloc(b->guard + tail);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = km_cu->cuMemcpyDtoH(p, b->base, b->guard);
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyDtoH(p + b->guard, b->ptr + b->bytes, tail);
  if (r != CUDA_SUCCESS) { free(p); return r; }
  for (size_t i = b->guard; *ok && i-- > 0;) /* nearest the data first */
    if (p[i] != KM_GUARD_BYTE) {
      *ok = 0;
      *side = 0;
      *offset = b->guard - i;
      for (size_t j = 0; j < b->guard; j++) *count += p[j] != KM_GUARD_BYTE;
    }
  for (size_t i = 0; *ok && i < tail; i++)
    if (p[b->guard + i] != KM_GUARD_BYTE) {
      *ok = 0;
      *side = 1;
      *offset = i;
      for (size_t j = i; j < tail; j++) *count += p[b->guard + j] != KM_GUARD_BYTE;
    }
  free(p);
  return CUDA_SUCCESS;
}

/* ==== compare ==== */

/* Must match struct cmp_out in runtime/kernels/km_util.cu. */
typedef struct {
  unsigned long long mismatches, nan_got, inf_got, first_inv; /* ~first; 0: none */
  unsigned long long unwritten;
  unsigned long long compared; /* elements read */
  unsigned long long max_abs_bits, max_rel_bits;
  unsigned long long n_examples;
  unsigned long long examples[32];
} km_cmp_dev;
_Static_assert(sizeof(km_cmp_dev) == 8 * KM_CMP_SLOTS, "KM_CMP_SLOTS: km_cmp_dev's size in 8-byte slots");

static int cmp_int64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

CUresult km_devcompare_at(km_dtype dt, CUdeviceptr pa, CUdeviceptr pb, uint64_t n, const km_tol *tol,
                          int poison_on, CUstream s, CUdeviceptr dres, const km_lines *smp) {
  CUfunction fn;
  CUresult r = km_cuda_util_get("km_compare", &fn);
  if (r != CUDA_SUCCESS) return r;
  int dti = (int)dt, eqnan = tol->equal_nan;
  double atol = tol->atol, rtol = tol->rtol;
  unsigned long long poison = poison_on ? km_poison_pattern(dt) : 0;
  uint64_t skey = smp ? smp->key : 0, lbytes = smp ? smp->bytes : 0;
  unsigned shift = smp ? km_lines_used_shift(smp, n * km_dtype_size(dt)) : 0;
  void *args[] = {&pa, &pb, &dti, &n, &atol, &rtol, &eqnan, &dres, &poison_on, &poison, &skey, &shift, &lbytes};
  /* the slots are zero already (the caller's: a ledger's begin, acc_zeroed), which reads as
   * an empty result: no memset of its own (each was a few microseconds of the GPU's timeline) */
  if (n) r = km_cuda_util_launch(fn, (n >> shift) + 1, s, args);
  return r;
}

void km_devcompare_decode(const uint64_t *slots, uint64_t n, km_cmp_result *res, uint64_t *unwritten) {
  km_cmp_dev out;
  memcpy(&out, slots, sizeof out);
  memset(res, 0, sizeof *res);
  res->n = n;
  res->mismatches = out.mismatches;
  res->nan_got = out.nan_got;
  res->inf_got = out.inf_got;
  res->compared = out.compared;
  memcpy(&res->max_abs, &out.max_abs_bits, 8);
  memcpy(&res->max_rel, &out.max_rel_bits, 8);
  res->first = out.mismatches && out.first_inv ? (int64_t)~out.first_inv : -1;
  res->n_examples = (int)(out.n_examples < 32 ? out.n_examples : 32);
  for (int i = 0; i < res->n_examples; i++) res->examples[i] = (int64_t)out.examples[i];
  qsort(res->examples, (size_t)res->n_examples, sizeof(int64_t), cmp_int64);
  res->ok = res->mismatches == 0;
  if (unwritten) *unwritten = out.unwritten;
}

CUresult km_devcompare(km_dtype dt, CUdeviceptr pa, CUdeviceptr pb, uint64_t n, const km_tol *tol,
                       int poison_on, CUstream s, km_cmp_result *res, uint64_t *unwritten) {
  uint64_t slots[KM_CMP_SLOTS];
  /* the result in the accumulator array (no allocation: a cuMemFree waits for the device),
   * one wait for the stream; the lock keeps the array the judge's for the whole compare */
  pthread_mutex_lock(&dg_lock);
  CUresult r = acc_zeroed(KM_CMP_SLOTS, s);
  if (r == CUDA_SUCCESS) r = km_devcompare_at(dt, pa, pb, n, tol, poison_on, s, dg_acc, NULL);
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyDtoHAsync(slots, dg_acc, sizeof slots, s);
  if (r == CUDA_SUCCESS) r = km_cu->cuStreamSynchronize(s);
  pthread_mutex_unlock(&dg_lock);
  if (r != CUDA_SUCCESS) return r;
  km_devcompare_decode(slots, n, res, unwritten);
  return CUDA_SUCCESS;
}
