/* test_utf8.c — UTF-8 validity (km_utf8_core.c), which every JSON writer of kmrun relies on. */
#include <string.h>
#include "test.h"
#include "km_utf8_core.h"

#define CHECK(s) km_utf8_check((s), sizeof(s) - 1)

TEST(valid_text_passes) {
  ASSERT_EQ_INT(CHECK(""), 0);
  ASSERT_EQ_INT(CHECK("plain ascii"), 11);
  ASSERT_EQ_INT(CHECK("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"), 9); /* é € 😀 */
  ASSERT_EQ_INT(CHECK("\xf4\x8f\xbf\xbf"), 4);                     /* U+10FFFF */
  ASSERT_EQ_INT(CHECK("\xed\x9f\xbf"), 3);                         /* U+D7FF */
  ASSERT_EQ_INT(CHECK("a\0b"), 3);
}

TEST(first_bad_byte_is_found) {
  ASSERT_EQ_INT(CHECK("caf\xe9 au lait"), 3);      /* Latin-1 é */
  ASSERT_EQ_INT(CHECK("\xff"), 0);
  ASSERT_EQ_INT(CHECK("ab\x80"), 2);               /* stray continuation */
  ASSERT_EQ_INT(CHECK("ab\xc0\xaf"), 2);           /* overlong '/' */
  ASSERT_EQ_INT(CHECK("\xe0\x80\xaf"), 0);         /* overlong, 3 bytes */
  ASSERT_EQ_INT(CHECK("\xf0\x8f\xbf\xbf"), 0);     /* overlong, 4 bytes */
  ASSERT_EQ_INT(CHECK("x\xed\xa0\x80"), 1);        /* surrogate U+D800 */
  ASSERT_EQ_INT(CHECK("\xf4\x90\x80\x80"), 0);     /* past U+10FFFF */
  ASSERT_EQ_INT(CHECK("\xf5\x80\x80\x80"), 0);
  ASSERT_EQ_INT(CHECK("ok\xe2\x82"), 2);           /* cut short at the end */
  ASSERT_EQ_INT(CHECK("ok\xe2\x82z"), 2);          /* cut short before ASCII */
}

TEST(sequence_lengths) {
  const unsigned char *u = (const unsigned char *)"\xe2\x82\xac";
  ASSERT_EQ_INT(km_utf8_seq(u, 3), 3);
  ASSERT_EQ_INT(km_utf8_seq(u, 2), 0); /* fewer bytes readable than it needs */
  ASSERT_EQ_INT(km_utf8_seq((const unsigned char *)"A", 1), 1);
  ASSERT_EQ_INT(km_utf8_seq((const unsigned char *)"\xc1\xbf", 2), 0);
  ASSERT_EQ_INT(strlen(KM_UTF8_REPLACEMENT_ESC), 6);
}

/* Every invalid byte becomes \ufffd, valid runs stay as they are; the length is told first. */
TEST(repair_replaces_each_bad_byte) {
  const char valid[] = "caf\xc3\xa9";
  ASSERT_EQ_INT((int)km_utf8_repaired_len(valid, 5), 5);
  const char bad[] = "\xff" "a\xe9\xc3\xa9\x80";
  size_t n = sizeof bad - 1, len = km_utf8_repaired_len(bad, n);
  ASSERT_EQ_INT((int)len, 3 * 6 + 1 + 2);
  char out[64] = {0};
  km_utf8_repair(out, bad, n);
  ASSERT_EQ_STR(out, "\\ufffd" "a\\ufffd\xc3\xa9\\ufffd");
}

int main(void) {
  RUN(valid_text_passes);
  RUN(first_bad_byte_is_found);
  RUN(sequence_lengths);
  RUN(repair_replaces_each_bad_byte);
  return DONE();
}
