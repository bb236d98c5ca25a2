/* test_hash.c — SHA-256 against the FIPS 180-4 / NIST example vectors, padding edges
 * and streaming in odd chunk sizes. */
#include <stdlib.h>
#include <string.h>
#include "test.h"
#include "km_hash_core.h"

static void hex_of(const void *data, size_t n, char out[KM_SHA256_HEX]) {
  km_sha256_hex(data, n, out);
}

TEST(empty_string) {
  char h[KM_SHA256_HEX];
  hex_of("", 0, h);
  ASSERT_EQ_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(abc) {
  char h[KM_SHA256_HEX];
  hex_of("abc", 3, h);
  ASSERT_EQ_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(message_448_bits) {
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  char h[KM_SHA256_HEX];
  ASSERT_EQ_INT(strlen(m), 56);
  hex_of(m, strlen(m), h);
  ASSERT_EQ_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(message_896_bits) {
  const char *m = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                  "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  char h[KM_SHA256_HEX];
  ASSERT_EQ_INT(strlen(m), 112);
  hex_of(m, strlen(m), h);
  ASSERT_EQ_STR(h, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

/* A million 'a' fed in chunks of 1, 2, 3, ... 97 bytes, so block boundaries fall at
 * every offset. */
TEST(million_a_streamed_in_odd_chunks) {
  static char a[97];
  memset(a, 'a', sizeof a);
  km_sha256_ctx c;
  km_sha256_init(&c);
  size_t left = 1000000, step = 1;
  while (left) {
    size_t n = step < left ? step : left;
    km_sha256_update(&c, a, n);
    left -= n;
    step = step % 97 + 1;
  }
  uint8_t d[KM_SHA256_SIZE];
  char h[KM_SHA256_HEX];
  km_sha256_final(&c, d);
  km_hex(d, sizeof d, h);
  ASSERT_EQ_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Lengths around the padding boundary (55/56 bytes leave no room for the length). */
TEST(padding_edges) {
  static const struct { size_t n; const char *hex; } cases[] = {
      {55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"},
      {56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"},
      {63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"},
      {64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"},
      {65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"},
      {119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"},
      {120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"},
      {1000, "4e4c294b331f7a2099a379bec34b9f9fc03dc46ab465d998f4d683da53487e6d"},
  };
  uint8_t buf[1000];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i % 251);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char h[KM_SHA256_HEX];
    hex_of(buf, cases[i].n, h);
    ASSERT_EQ_STR(h, cases[i].hex);
  }
}

/* Streaming any split of the input gives the one-shot digest. */
TEST(streaming_equals_one_shot) {
  uint8_t buf[300];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 7 + 3);
  uint8_t want[KM_SHA256_SIZE];
  km_sha256(buf, sizeof buf, want);
  for (size_t cut = 0; cut <= sizeof buf; cut++) {
    km_sha256_ctx c;
    uint8_t got[KM_SHA256_SIZE];
    km_sha256_init(&c);
    km_sha256_update(&c, buf, cut);
    km_sha256_update(&c, NULL, 0);
    km_sha256_update(&c, buf + cut, sizeof buf - cut);
    km_sha256_final(&c, got);
    if (memcmp(got, want, sizeof want)) T_FAIL("split at %zu differs", cut);
  }
}

TEST(hex_encoding) {
  const uint8_t b[] = {0x00, 0x0f, 0xa5, 0xff};
  char h[9];
  km_hex(b, sizeof b, h);
  ASSERT_EQ_STR(h, "000fa5ff");
}

/* The kernel's random bytes: every byte written (a 4 KiB fill past getrandom's 256-byte
 * atomic size), two draws differ, nothing asked for is nothing written. */
TEST(random_bytes_fill_and_differ) {
  static unsigned char a[4096], b[4096];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  ASSERT_EQ_INT(km_random_bytes(a, sizeof a), 0);
  ASSERT_EQ_INT(km_random_bytes(b, sizeof b), 0);
  ASSERT(memcmp(a, b, sizeof a) != 0);
  int zeros = 0;
  for (size_t i = 0; i < sizeof a; i++) zeros += a[i] == 0;
  ASSERT(zeros < 64); /* about 16 expected; an unwritten tail would be hundreds */
  ASSERT_EQ_INT(km_random_bytes(a, 0), 0);
}

int main(void) {
  RUN(empty_string);
  RUN(abc);
  RUN(message_448_bits);
  RUN(message_896_bits);
  RUN(million_a_streamed_in_odd_chunks);
  RUN(padding_edges);
  RUN(streaming_equals_one_shot);
  RUN(hex_encoding);
  RUN(random_bytes_fill_and_differ);
  return DONE();
}
