/* km_hash_core.c — SHA-256 after FIPS 180-4 (see km_hash_core.h). Written for clarity
 * over speed: cache keys hash a few kilobytes of source and a cubin per call, which costs
 * microseconds either way. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include "km_hash_core.h"

int km_random_bytes(void *buf, size_t n) {
  unsigned char *b = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(b + got, n - got, 0);
    if (r > 0) got += (size_t)r;
    else if (r < 0 && errno != EINTR) return -1;
  }
  return 0;
}

/* First 32 bits of the fractional parts of the cube roots of the first 64 primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

/* Big-endian loads/stores by bytes, so the code is the same on any host byte order. */
static inline uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static void compress(uint32_t h[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = k + S1 + ch + K[i] + w[i];
    uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d;
  h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

void km_sha256_init(km_sha256_ctx *c) {
  /* First 32 bits of the fractional parts of the square roots of the first 8 primes. */
  static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, H0, sizeof H0);
  c->nbytes = 0;
  c->nblock = 0;
}

void km_sha256_update(km_sha256_ctx *c, const void *data, size_t n) {
  const uint8_t *p = data;
  if (n == 0) return; /* data may be NULL then, and memcpy(NULL) is undefined */
  c->nbytes += n;
  if (c->nblock) { /* top up the pending block first */
    size_t take = 64 - c->nblock < n ? 64 - c->nblock : n;
    memcpy(c->block + c->nblock, p, take);
    c->nblock += take;
    p += take;
    n -= take;
    if (c->nblock < 64) return;
    compress(c->h, c->block);
    c->nblock = 0;
  }
  for (; n >= 64; p += 64, n -= 64) compress(c->h, p); /* whole blocks straight from input */
  memcpy(c->block, p, n);
  c->nblock = n;
}

void km_sha256_final(km_sha256_ctx *c, uint8_t out[KM_SHA256_SIZE]) {
  uint64_t bits = c->nbytes * 8;
  /* Padding: 0x80, zeros up to 56 mod 64, then the bit length big-endian. */
  c->block[c->nblock++] = 0x80;
  if (c->nblock > 56) {
    memset(c->block + c->nblock, 0, 64 - c->nblock);
    compress(c->h, c->block);
    c->nblock = 0;
  }
  memset(c->block + c->nblock, 0, 56 - c->nblock);
  store_be32(c->block + 56, (uint32_t)(bits >> 32));
  store_be32(c->block + 60, (uint32_t)bits);
  compress(c->h, c->block);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, c->h[i]);
  memset(c, 0, sizeof *c); /* a finished context is not reusable without init */
}

void km_sha256(const void *data, size_t n, uint8_t out[KM_SHA256_SIZE]) {
  km_sha256_ctx c;
  km_sha256_init(&c);
  km_sha256_update(&c, data, n);
  km_sha256_final(&c, out);
}

void km_hex(const uint8_t *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

void km_sha256_hex(const void *data, size_t n, char out[KM_SHA256_HEX]) {
  uint8_t d[KM_SHA256_SIZE];
  km_sha256(data, n, d);
  km_hex(d, sizeof d, out);
}
