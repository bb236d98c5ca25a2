/* km_hash_core.h — SHA-256 (FIPS 180-4), streaming and one-shot, plus hex encoding and the
 * kernel's random bytes.
 *
 * Pure C, no allocation: a km_sha256_ctx is a plain value the caller owns; it may
 * live on the stack and needs no cleanup. Used for content-addressed cache keys and for
 * integrity digests of cache entries. */
#ifndef KM_HASH_CORE_H
#define KM_HASH_CORE_H
#include <stddef.h>
#include <stdint.h>

#define KM_SHA256_SIZE 32 /* digest bytes */
#define KM_SHA256_HEX 65  /* hex digest chars + NUL */

typedef struct km_sha256_ctx {
  uint32_t h[8];      /* chaining state */
  uint64_t nbytes;    /* message length so far */
  uint8_t block[64];  /* pending partial block */
  size_t nblock;      /* bytes used in block */
} km_sha256_ctx;

void km_sha256_init(km_sha256_ctx *c);
void km_sha256_update(km_sha256_ctx *c, const void *data, size_t n);
/* Writes the digest; the context must be initialised again before reuse. */
void km_sha256_final(km_sha256_ctx *c, uint8_t out[KM_SHA256_SIZE]);

void km_sha256(const void *data, size_t n, uint8_t out[KM_SHA256_SIZE]);
void km_sha256_hex(const void *data, size_t n, char out[KM_SHA256_HEX]);

/* Lower-case hex of n bytes into out (2n chars and a NUL). */
void km_hex(const uint8_t *in, size_t n, char *out);

/* n bytes of the kernel's CSPRNG (getrandom; interrupted and short reads retried): keys,
 * ids, the judge's draws. 0, or -1 with errno set where getrandom fails: no weaker fallback
 * here, each caller says what it does then. */
int km_random_bytes(void *buf, size_t n);
#endif
