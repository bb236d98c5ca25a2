/* km_devops.h — device work in plain C: guarded buffers, fills, random data, checksums,
 * guard checks and the on-GPU compare. No lua_State here: km.buffer and km.compare (the Lua
 * bindings) and the public C API (include/kmrun.h, runtime/glue/kmrun_api.c) all call these, so
 * each operation has one implementation.
 *
 * Ownership: a km_devbuf is a plain value the caller owns; km_devbuf_alloc fills it with a
 * device allocation that km_devbuf_free releases (idempotent: base is 0 afterwards).
 * Every function returns a CUresult; the driver must be loaded (km_cuda_get). Work goes to
 * the stream given (NULL: the default stream). */
#ifndef KM_DEVOPS_H
#define KM_DEVOPS_H
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "km_compare_core.h"
#include "km_dtype.h"

#define KM_MAXDIM 8
#define KM_GUARD_BYTE 0xA5
#define KM_DEFAULT_GUARD 4096

/* [guard | data | pad + guard]; ptr is the 256-byte aligned data start. */
typedef struct km_devbuf {
  CUdeviceptr base, ptr; /* allocation start (0 once freed) and data start */
  size_t bytes, guard, alloc;
  km_dtype dtype;
  int ndim;
  int64_t numel;
  int64_t shape[KM_MAXDIM];
} km_devbuf;

/* Sets dtype, shape, numel and the sizes from shape (ndim entries); no allocation.
 * Returns 0, or -1 for a bad shape with *why saying what is wrong. */
int km_devbuf_init(km_devbuf *b, km_dtype dt, const int64_t *shape, int ndim, size_t guard,
                   const char **why);
/* Allocates b (after km_devbuf_init) and fills both guard zones. */
CUresult km_devbuf_alloc(km_devbuf *b);
void km_devbuf_free(km_devbuf *b);
/* How many km_devbufs are allocated in this process now, and their bytes (guards included). */
void km_devbuf_live(long long *count, long long *bytes);
/* The most bytes of device buffers live at once since the last km_devbuf_reset_peak (which
 * sets it to the bytes live now). */
long long km_devbuf_peak(void);
void km_devbuf_reset_peak(void);
/* Refills both guard zones. */
CUresult km_devbuf_reset_guards(km_devbuf *b);
/* Writes an element-sized bit pattern into every element. */
CUresult km_devbuf_fill_pattern(const km_devbuf *b, uint64_t pattern, CUstream s);
/* The pattern of value v in b's dtype (an i64 value exact through iv when is_int). */
uint64_t km_devbuf_pattern(km_dtype dt, double v);
/* dist 0: uniform [a, b) (integers: [a, b]); 1: normal(mean a, std b); 2: integers [a, b].
 * Element i depends only on (seed, i). */
CUresult km_devbuf_random(const km_devbuf *b, int dist, double a, double c, uint64_t seed, CUstream s);
/* bad[i]: how many bytes of bs[i]'s guard zones changed, for n buffers with one wait for s. */
CUresult km_devbufs_guards(const km_devbuf *const *bs, size_t n, CUstream s, uint64_t *bad);
/* *bad: how many elements of b differ (bitwise) from what km_devbuf_random writes with the
 * same arguments; waits for the stream. */
CUresult km_devbuf_random_check(const km_devbuf *b, int dist, double a, double c, uint64_t seed, CUstream s,
                                uint64_t *bad);
/* A timed call's parameter perturbed (km_perturb): b = the n elements at src, each times a
 * factor in [0.5, 1.5) drawn from (key, element index); floating dtypes only, any other
 * copied. src may be b's own memory. Enqueued on s, no wait. With acc not 0: counts into
 * the slot at acc the elements of b that differ (bitwise) from that instead, writing nothing. */
CUresult km_devbuf_perturb_at(const km_devbuf *b, CUdeviceptr src, uint64_t key, CUstream s, CUdeviceptr acc);
/* km_util.cu's km_lines_copy: the lines `l` draws from a buffer of `bytes` at `full`, to
 * `compact` in order (scatter 0), or back (scatter 1); compact holds km_lines_drawn_bytes. */
CUresult km_devlines_copy(CUdeviceptr full, CUdeviceptr compact, uint64_t bytes, const km_lines *l, int scatter,
                          CUstream s);
/* Buffers of at least this many bytes are poisoned sparsely by km_devbuf_poison_sparse. */
#define KM_SPARSE_POISON_MIN (64 * 1024)
/* The poison pattern in one 128-byte line of every 4 KiB block, the line drawn from
 * (seed, block) (km_poison_sparse); a buffer under KM_SPARSE_POISON_MIN is poisoned whole. */
CUresult km_devbuf_poison_sparse(const km_devbuf *b, uint64_t seed, CUstream s);
/* Keyed 64-bit digest of the bytes, computed on the GPU (synchronizes s). The key is a
 * per-process random, so a kernel cannot forge one, and values compare only within one
 * process. No allocation after the first call in a context. */
CUresult km_devbuf_checksum(const km_devbuf *b, CUstream s, uint64_t *out);
/* The same digest of n device ranges (ptrs[i], bytes[i]) into out[i]: one launch per range,
 * one synchronization. */
CUresult km_dev_digest(const CUdeviceptr *ptrs, const uint64_t *bytes, size_t n, CUstream s, uint64_t *out);
/* Reads both guard zones back. *ok = 1 when intact; otherwise *side is 0 (front) or 1
 * (back), *count the bytes overwritten and *offset the nearest bad byte's distance from
 * the data (front: bytes before the start; back: bytes past the end). */
CUresult km_devbuf_check_guards(const km_devbuf *b, int *ok, int *side, size_t *count, size_t *offset);

/* allclose of n elements of dtype dt at two device pointers, on the GPU (synchronizes s).
 * poison_on counts elements of got still holding km_poison_pattern(dt) into *unwritten. */
CUresult km_devcompare(km_dtype dt, CUdeviceptr got, CUdeviceptr want, uint64_t n,
                       const km_tol *tol, int poison_on, CUstream s, km_cmp_result *out,
                       uint64_t *unwritten);
/* The same checks enqueued with no wait (a batch of checks read back once: km.buffer's
 * ledger): each writes its result to 8-byte slots at `acc` in device memory, zeroing them
 * first in stream order — random_check and checksum one slot per buffer or range, guards
 * one per buffer, a compare KM_CMP_SLOTS, decoded by km_devcompare_decode once copied back. */
#define KM_CMP_SLOTS 41
/* smp (NULL: every line): random_check and compare read a sample of the buffers' lines
 * (km_lines: the shift given is lowered for a small buffer, km_lines_shift). */
CUresult km_devbuf_random_check_at(const km_devbuf *b, int dist, double a, double c, uint64_t seed, CUstream s,
                                   CUdeviceptr acc, const km_lines *smp);
CUresult km_devbufs_guards_at(const km_devbuf *const *bs, size_t n, CUstream s, CUdeviceptr acc);
/* Refills the guard zones of n buffers, enqueued on s (a few launches, no wait). */
CUresult km_devbufs_reset_guards(const km_devbuf *const *bs, size_t n, CUstream s);
CUresult km_dev_digest_at(const CUdeviceptr *ptrs, const uint64_t *bytes, size_t n, CUstream s, CUdeviceptr acc);
CUresult km_devcompare_at(km_dtype dt, CUdeviceptr got, CUdeviceptr want, uint64_t n, const km_tol *tol,
                          int poison_on, CUstream s, CUdeviceptr acc, const km_lines *smp);
void km_devcompare_decode(const uint64_t *slots, uint64_t n, km_cmp_result *res, uint64_t *unwritten);
#endif