/* km_utf8_core.h — UTF-8 validity (RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF), for every writer of JSON text: km.json's encoder, the store's export lines and
 * the model client's request bodies. Plain C over caller-owned bytes; nothing allocated. */
#ifndef KM_UTF8_CORE_H
#define KM_UTF8_CORE_H

#include <stddef.h>

/* The length (1..4) of the valid UTF-8 sequence starting at s (n > 0 bytes readable), or 0
 * when s[0] starts none: a stray continuation byte, a byte never used in UTF-8 (0xC0, 0xC1,
 * 0xF5..0xFF), a sequence cut short, an overlong form, a surrogate or a code point past
 * U+10FFFF. */
size_t km_utf8_seq(const unsigned char *s, size_t n);

/* The offset of the first byte of s that is not part of valid UTF-8, or n when all are. */
size_t km_utf8_check(const char *s, size_t n);

/* What replaces each invalid byte in JSON text kmrun writes: U+FFFD as a JSON escape. */
#define KM_UTF8_REPLACEMENT_ESC "\\ufffd"

/* The length of s with every invalid byte replaced by KM_UTF8_REPLACEMENT_ESC (n when s is
 * valid UTF-8), and that text written to dst (room for km_utf8_repaired_len bytes; no NUL
 * added). For JSON text whose invalid bytes can stand only inside strings. */
size_t km_utf8_repaired_len(const char *s, size_t n);
void km_utf8_repair(char *dst, const char *s, size_t n);

#endif
