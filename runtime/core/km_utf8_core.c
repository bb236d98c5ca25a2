/* km_utf8_core.c — UTF-8 validity, byte by byte (km_utf8_core.h). */
#include <string.h>

#include "km_utf8_core.h"

size_t km_utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;      /* overlong below U+0800 */
    else if (c == 0xED) hi = 0x9F; /* U+D800..U+DFFF are surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;      /* overlong below U+10000 */
    else if (c == 0xF4) hi = 0x8F; /* past U+10FFFF */
  } else
    return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

size_t km_utf8_check(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    size_t k = km_utf8_seq(u + i, n - i);
    if (!k) return i;
    i += k;
  }
  return n;
}

size_t km_utf8_repaired_len(const char *s, size_t n) {
  size_t len = n;
  for (size_t at = km_utf8_check(s, n); at < n; at += 1 + km_utf8_check(s + at + 1, n - at - 1))
    len += sizeof KM_UTF8_REPLACEMENT_ESC - 2; /* one byte becomes the 6 of the escape */
  return len;
}

void km_utf8_repair(char *dst, const char *s, size_t n) {
  for (size_t at = 0;;) {
    size_t stop = at + km_utf8_check(s + at, n - at);
    memcpy(dst, s + at, stop - at);
    dst += stop - at;
    if (stop >= n) return;
    memcpy(dst, KM_UTF8_REPLACEMENT_ESC, sizeof KM_UTF8_REPLACEMENT_ESC - 1);
    dst += sizeof KM_UTF8_REPLACEMENT_ESC - 1;
    at = stop + 1;
  }
}
