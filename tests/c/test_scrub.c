/* test_scrub.c — the secrets list and the scrubber (km_scrub_core.c): which environment
 * names hold keys, which variables a clean child environment keeps, replacement (longest
 * secret first, several occurrences, nothing to replace), the minimum length, the bound on
 * growth, and concurrent scrubbing while secrets are added. */
#include <pthread.h>
#include <stdlib.h>
#include "test.h"
#include "km.h"
#include "km_scrub_core.h"

TEST(key_like_names) {
  static const char *const yes[] = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_SERVICE_API_KEY",
                                    "HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY",
                                    "CLIENT_SECRET", "MY_SECRET_VALUE", "DB_PASSWORD", "GITHUB_PAT",
                                    "openai_api_key", "KEY", "TOKEN", NULL};
  static const char *const no[] = {"PATH", "HOME", "KM_MAX_TOKENS", "KM_TOKEN_BUDGET", "CUDA_CACHE_PATH",
                                   "PYTHONPATH", "KEYBOARD", "TOKENIZER", "KM_DEVICE", "LANG", "", NULL};
  for (int i = 0; yes[i]; i++)
    if (!km_scrub_key_like(yes[i], strlen(yes[i]))) T_FAIL("%s should look like a key", yes[i]);
  for (int i = 0; no[i]; i++)
    if (km_scrub_key_like(no[i], strlen(no[i]))) T_FAIL("%s should not look like a key", no[i]);
  /* only the name's n bytes count: "OPENAI_API_KEY=..." judged by its name */
  ASSERT(km_scrub_key_like("OPENAI_API_KEY=x", 14));
  ASSERT(!km_scrub_key_like("PATH_API_KEY", 4));
}

TEST(clean_environment_allow_list) {
  static const char *const pass[] = {"PATH=/usr/bin", "HOME=/root", "TMPDIR=/tmp", "LANG=C.UTF-8",
                                     "LC_ALL=C", "LD_LIBRARY_PATH=/usr/local/cuda/lib64",
                                     "CUDA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all",
                                     "KM_DEVICE=1", "KM_CACHE_DIR=/c", NULL};
  static const char *const stop[] = {"OPENAI_API_KEY=sk-abcdefgh", "ANTHROPIC_API_KEY=x", "KM_API_KEY=x",
                                     "KM_TOKEN=x", "CUDA_SECRET_THING=x", "HF_TOKEN=x", "LD_PRELOAD=/x.so",
                                     "LANGUAGE=en", "PYTHONPATH=/p", "SHELL=/bin/sh", "KM_=x", "=x",
                                     "PATH", "", NULL};
  for (int i = 0; pass[i]; i++)
    if (!km_scrub_env_allowed(pass[i])) T_FAIL("%s should pass", pass[i]);
  for (int i = 0; stop[i]; i++)
    if (km_scrub_env_allowed(stop[i])) T_FAIL("%s should not pass", stop[i]);
  ASSERT(!km_scrub_env_allowed(NULL));
}

TEST(replaces_every_occurrence) {
  km_scrub_reset();
  ASSERT_EQ_INT(km_scrub_count(), 0);
  const char *key = "sk-live-0123456789";
  ASSERT_EQ_INT(km_scrub_add(key, strlen(key)), 0);
  ASSERT_EQ_INT(km_scrub_count(), 1);
  const char *s = "Authorization: Bearer sk-live-0123456789\nagain sk-live-0123456789.";
  char *out;
  size_t n, hits;
  ASSERT_EQ_INT(km_scrub(s, strlen(s), &out, &n, &hits), 0);
  ASSERT(out != NULL);
  ASSERT_EQ_STR(out, "Authorization: Bearer [redacted]\nagain [redacted].");
  ASSERT_EQ_INT(n, strlen(out));
  ASSERT_EQ_INT(hits, 2);
  free(out);
  /* nothing to replace: no copy */
  ASSERT_EQ_INT(km_scrub("plain text", 10, &out, &n, &hits), 0);
  ASSERT(out == NULL);
  ASSERT_EQ_INT(hits, 0);
  /* bytes after a NUL count too (the length is what is scrubbed) */
  char bin[] = "a\0sk-live-0123456789";
  ASSERT_EQ_INT(km_scrub(bin, sizeof bin - 1, &out, &n, &hits), 0);
  ASSERT(out && n == 2 + strlen(KM_SCRUB_MARK) && !memcmp(out + 2, KM_SCRUB_MARK, n - 2));
  free(out);
}

TEST(short_secrets_are_not_kept_and_duplicates_once) {
  km_scrub_reset();
  ASSERT_EQ_INT(km_scrub_add("1234567", 7), 0);
  ASSERT_EQ_INT(km_scrub_count(), 0);
  ASSERT_EQ_INT(km_scrub_add("12345678", 8), 0);
  ASSERT_EQ_INT(km_scrub_add("12345678", 8), 0);
  ASSERT_EQ_INT(km_scrub_count(), 1);
  ASSERT_EQ_INT(km_scrub_add(NULL, 0), 0);
  ASSERT_EQ_INT(km_scrub_count(), 1);
}

TEST(longest_secret_wins) {
  km_scrub_reset();
  km_scrub_add("abcdefgh", 8);
  km_scrub_add("abcdefghijkl", 12);
  km_scrub_add("xyzabcdefgh", 11);
  char *out;
  size_t n, hits;
  const char *s = "--abcdefghijkl--abcdefgh--xyzabcdefghijkl--";
  ASSERT_EQ_INT(km_scrub(s, strlen(s), &out, &n, &hits), 0);
  /* at "xyz..." the 11-byte secret starts first and wins; what follows ("ijkl") stays */
  ASSERT_EQ_STR(out, "--[redacted]--[redacted]--[redacted]ijkl--");
  ASSERT_EQ_INT(hits, 3);
  free(out);
}

TEST(from_the_environment) {
  km_scrub_reset();
  char *env[] = {"OPENAI_API_KEY=sk-proj-TESTVALUE42", "PATH=/usr/local/bin:/usr/bin", "KM_TOKEN=short",
                 "HF_TOKEN=hf_abcdefghijklmnop", "NOEQUALS", NULL};
  ASSERT_EQ_INT(km_scrub_add_env(env), 0);
  ASSERT_EQ_INT(km_scrub_count(), 2); /* PATH is not a key; KM_TOKEN's value is too short */
  const char *s = "PATH=/usr/local/bin:/usr/bin key=sk-proj-TESTVALUE42 hf=hf_abcdefghijklmnop";
  char *out;
  size_t n;
  ASSERT_EQ_INT(km_scrub(s, strlen(s), &out, &n, NULL), 0);
  ASSERT_EQ_STR(out, "PATH=/usr/local/bin:/usr/bin key=[redacted] hf=[redacted]");
  free(out);
}

TEST(bound_holds_for_back_to_back_secrets) {
  km_scrub_reset();
  km_scrub_add("SECRET01", 8);
  char s[8 * 50 + 3];
  for (int i = 0; i < 50; i++) memcpy(s + 8 * i, "SECRET01", 8);
  memcpy(s + 400, "xyz", 3);
  size_t n = sizeof s, cap = km_scrub_bound(n);
  char *dst = malloc(cap);
  size_t hits;
  size_t w = km_scrub_to(s, n, dst, &hits);
  ASSERT_EQ_INT(hits, 50);
  ASSERT_EQ_INT(w, 50 * strlen(KM_SCRUB_MARK) + 3);
  ASSERT(w <= cap);
  ASSERT(!memcmp(dst + w - 3, "xyz", 3));
  /* no secret: an exact copy */
  w = km_scrub_to("abc", 3, dst, &hits);
  ASSERT_EQ_INT(w, 3);
  ASSERT_EQ_INT(hits, 0);
  ASSERT(!memcmp(dst, "abc", 3));
  free(dst);
}

/* Threads scrub while the main thread adds secrets: every result is either the text or
 * the text with the secret replaced, never torn (run under TSan/ASan for more). */
static void *scrubber(void *arg) {
  (void)arg;
  const char *s = "x THREADSECRET-0001 y";
  for (int i = 0; i < 2000; i++) {
    char *out;
    size_t n;
    if (km_scrub(s, strlen(s), &out, &n, NULL)) return (void *)1;
    if (out && strcmp(out, "x [redacted] y")) return (void *)1;
    free(out);
  }
  return NULL;
}

TEST(concurrent_use) {
  km_scrub_reset();
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, scrubber, NULL);
  char name[32];
  for (int i = 0; i < 200; i++) {
    snprintf(name, sizeof name, "OTHER-SECRET-%04d", i);
    km_scrub_add(name, strlen(name));
    if (i == 100) km_scrub_add("THREADSECRET-0001", 17);
  }
  int bad = 0;
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad |= r != NULL;
  }
  ASSERT(!bad);
  ASSERT_EQ_INT(km_scrub_count(), 201);
}

int main(void) {
  RUN(key_like_names);
  RUN(clean_environment_allow_list);
  RUN(replaces_every_occurrence);
  RUN(short_secrets_are_not_kept_and_duplicates_once);
  RUN(longest_secret_wins);
  RUN(from_the_environment);
  RUN(bound_holds_for_back_to_back_secrets);
  RUN(concurrent_use);
  km_scrub_reset();
  return DONE();
}
