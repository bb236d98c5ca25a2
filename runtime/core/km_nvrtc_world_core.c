/* km_nvrtc_world_core.c — the closed world candidate sources compile in (km_nvrtc_core.h).
 *
 * NVRTC opens any file an #include names and quotes the offending lines of what it read in
 * its log, so `#include "/proc/self/environ"` once put an API key into a verdict. Here
 * every include is checked before NVRTC sees the source.
 *
 * The attacker picks the spelling, so the check does not trust one reading of the text:
 * it translates phases 1-2 (trigraphs, line splices) and scans phase 3 (comments, string,
 * character and raw literals, pp-numbers) under every combination of the points where
 * compilers differ or the standard changed, and a directive found in any of them counts.
 * A '#' (or '%:') token starts a directive wherever it is, not only at a line start (a
 * comment spanning lines, `/ * .. * / #include`, is one space to the preprocessor). What
 * the scan cannot read one way only — an unterminated comment or raw string, an R"
 * prefix glued to '$' or non-ASCII — is refused rather than guessed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "km.h"
#include "km_nvrtc_world_core.h"

/* ======================================================================================
 * Readings
 * ==================================================================================== */

enum {
  RD_TRIGRAPHS = 1,    /* ??= is #, ??/ is \ (C++14 and older) */
  RD_LOOSE_SPLICE = 2, /* backslash, blanks, newline is a splice (GCC); else backslash-newline */
  RD_CR_NEWLINE = 4,   /* a lone CR ends a line; CR LF is one line end */
  RD_RAW_REVERT = 8,   /* raw strings are read from the untranslated text, as the standard says */
  RD_DIGIT_SEP = 16,   /* 1'000 is one pp-number (C++14) */
  RD_ALL = 31
};

/* The text after phases 1-2 under one reading; orig[i] is the source offset of t[i]. */
typedef struct view {
  char *t;
  size_t *orig; /* n + 1 entries: orig[n] = srclen */
  size_t n;
  const char *src;
  size_t srclen;
  int rd;
} view;

typedef struct checker {
  const km_nvrtc_world *w;
  const char *file;
  char *msg;
  size_t msgn;
  int refused;
} checker;

static char trigraph(char c) {
  switch (c) {
  case '=': return '#';
  case '/': return '\\';
  case '\'': return '^';
  case '(': return '[';
  case ')': return ']';
  case '!': return '|';
  case '<': return '{';
  case '>': return '}';
  case '-': return '~';
  }
  return 0;
}

static int is_hspace(int c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int translate(const char *s, size_t n, int rd, view *v) {
  memset(v, 0, sizeof *v);
  v->src = s;
  v->srclen = n;
  v->rd = rd;
  v->t = malloc(n + 1);
  v->orig = malloc((n + 1) * sizeof *v->orig);
  if (!v->t || !v->orig) return KM_ENOMEM;
  /* phase 1: trigraphs and line ends */
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    char c = s[i];
    size_t at = i, len = 1;
    if ((rd & RD_TRIGRAPHS) && c == '?' && i + 2 < n && s[i + 1] == '?' && trigraph(s[i + 2])) {
      c = trigraph(s[i + 2]);
      len = 3;
    } else if ((rd & RD_CR_NEWLINE) && c == '\r') {
      c = '\n';
      if (i + 1 < n && s[i + 1] == '\n') len = 2;
    }
    v->t[m] = c;
    v->orig[m++] = at;
    i += len;
  }
  /* phase 2: splices, in place (the text only shrinks) */
  size_t q = 0;
  for (size_t j = 0; j < m;) {
    if (v->t[j] == '\\') {
      size_t k = j + 1;
      if (rd & RD_LOOSE_SPLICE)
        while (k < m && is_hspace((unsigned char)v->t[k])) k++;
      if (k < m && v->t[k] == '\n') {
        j = k + 1;
        continue;
      }
    }
    v->t[q] = v->t[j];
    v->orig[q++] = v->orig[j];
    j++;
  }
  v->n = q;
  v->orig[q] = n;
  v->t[q] = '\0';
  return 0;
}

static void view_free(view *v) {
  free(v->t);
  free(v->orig);
}

static int at(const view *v, size_t i) { return i < v->n ? (unsigned char)v->t[i] : -1; }

/* ======================================================================================
 * Refusals
 * ==================================================================================== */

static size_t line_of(const view *v, size_t i) {
  size_t off = v->orig[i < v->n ? i : v->n], line = 1;
  for (size_t k = 0; k < off && k < v->srclen; k++) line += v->src[k] == '\n';
  return line;
}

/* Copies up to max bytes of s into out as printable ASCII ('?' for anything else). */
static void printable(char *out, size_t outn, const char *s, size_t n, size_t max) {
  size_t w = 0;
  for (size_t i = 0; i < n && i < max && w + 4 < outn; i++)
    out[w++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  if (n > max && w + 4 < outn) w += (size_t)snprintf(out + w, outn - w, "...");
  out[w] = '\0';
}

/* What the message ends with: what a source may include. */
static void add_allowed(checker *ck, size_t used) {
  if (used >= ck->msgn) return;
  char names[200] = "";
  size_t w = 0, shown = 0;
  for (size_t i = 0; i < ck->w->nheaders && w + 40 < sizeof names; i++, shown++) {
    char nm[40];
    const char *h = ck->w->headers[i].name;
    printable(nm, sizeof nm, h, strlen(h), 32);
    w += (size_t)snprintf(names + w, sizeof names - w, "%s\"%s\"", i ? ", " : "", nm);
  }
  if (shown < ck->w->nheaders) snprintf(names + w, sizeof names - w, ", ...");
  snprintf(ck->msg + used, ck->msgn - used,
           " Candidate code compiles in a closed world: it may include CUDA toolkit headers by "
           "name (<cuda_fp16.h>, <cuda_bf16.h>, <cuda/std/...>, <cooperative_groups.h>), kmrun's "
           "built-in <stdint.h> and <cstdint>, and the headers given with the task (%s).",
           w ? names : "none given");
}

/* Refuses with "file(line): error: what refused: why." (NVRTC's own form, so whatever
 * quotes the offending lines of a log quotes this one too) and the allowed list. */
static void refuse(checker *ck, const view *v, size_t i, const char *what, const char *why) {
  if (ck->refused) return;
  ck->refused = 1;
  char file[80];
  printable(file, sizeof file, ck->file, strlen(ck->file), 64);
  int n = snprintf(ck->msg, ck->msgn, "%s(%zu): error: %s refused: %s.", file, line_of(v, i), what, why);
  if (n > 0) add_allowed(ck, (size_t)n);
}

/* ======================================================================================
 * Phase 3: the scan
 * ==================================================================================== */

/* Bytes one identifier character takes at i (0: none). *exotic is set for '$', non-ASCII
 * bytes and \u escapes; *basic for a \u escape naming a basic character ("\u0069"), which
 * C++ forbids outside literals and which could spell a directive. */
static size_t ident_char(const view *v, size_t i, int *exotic, int *basic) {
  int c = at(v, i);
  if (c < 0) return 0;
  if (is_alpha(c) || is_digit(c)) return 1;
  if (c == '$' || c >= 0x80) { *exotic = 1; return 1; }
  if (c == '\\' && (at(v, i + 1) == 'u' || at(v, i + 1) == 'U')) {
    size_t nd = at(v, i + 1) == 'u' ? 4 : 8;
    unsigned long cp = 0;
    for (size_t k = 0; k < nd; k++) {
      int h = at(v, i + 2 + k);
      if (!is_hex(h)) return 0;
      cp = cp * 16 + (unsigned long)(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    *exotic = 1;
    if (cp < 0xa0) *basic = 1;
    return 2 + nd;
  }
  return 0;
}

static size_t ident_len(const view *v, size_t i, int *exotic, int *basic) {
  size_t j = i, k;
  if (is_digit(at(v, i))) return 0;
  while ((k = ident_char(v, j, exotic, basic))) j += k;
  return j - i;
}

/* Past the comment starting at i ("/ *"), or SIZE_MAX when it never ends. */
static size_t block_end(const view *v, size_t i) {
  for (size_t k = i + 2; k + 1 < v->n; k++)
    if (v->t[k] == '*' && v->t[k + 1] == '/') return k + 2;
  return SIZE_MAX;
}

/* Past the quoted literal opening at i; an unescaped line end ends it too (as compilers
 * recover), and an escape never swallows the line end. */
static size_t skip_quoted(const view *v, size_t i) {
  int q = at(v, i);
  size_t j = i + 1;
  while (j < v->n) {
    int c = at(v, j);
    if (c == q) return j + 1;
    if (c == '\n') return j;
    j += c == '\\' && at(v, j + 1) != '\n' ? 2 : 1;
  }
  return v->n;
}

static size_t skip_ppnum(const view *v, size_t i) {
  int ex = 0, basic = 0;
  size_t j = i + 1, k;
  for (;;) {
    int c = at(v, j);
    if ((c == '+' || c == '-') && strchr("eEpP", v->t[j - 1])) j++;
    else if (c == '.') j++;
    else if ((v->rd & RD_DIGIT_SEP) && c == '\'' && ident_char(v, j + 1, &ex, &basic)) j += 2;
    else if ((k = ident_char(v, j, &ex, &basic))) j += k;
    else return j;
  }
}

/* Past the raw literal whose opening quote is at t[j]; refuses what cannot be read. */
static size_t skip_raw(checker *ck, const view *v, size_t j) {
  int revert = v->rd & RD_RAW_REVERT;
  const char *s = revert ? v->src : v->t;
  size_t lim = revert ? v->srclen : v->n, start = revert ? v->orig[j] : j;
  size_t d = start + 1;
  while (d < lim && s[d] != '(' && d - start - 1 < 16 && !strchr(" )\\\t\v\f\n\r\"", s[d])) d++;
  if (d >= lim || s[d] != '(') {
    refuse(ck, v, j, "a raw string literal", "its delimiter is malformed, so the include check cannot tell where it ends");
    return v->n;
  }
  size_t dn = d - start - 1;
  for (size_t k = d + 1; k + dn + 1 < lim; k++) {
    if (s[k] == ')' && !memcmp(s + k + 1, s + start + 1, dn) && s[k + dn + 1] == '"') {
      size_t end = k + dn + 2;
      if (!revert) return end;
      size_t lo = j, hi = v->n; /* the first translated position at or after `end` */
      while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->orig[mid] < end) lo = mid + 1;
        else hi = mid;
      }
      return lo;
    }
  }
  refuse(ck, v, j, "a raw string literal", "it never ends, so the include check cannot read past it");
  return v->n;
}

/* Past blanks and comments from i, on the same logical line (a comment over several lines
 * is one blank to the preprocessor). */
static size_t skip_blank(checker *ck, const view *v, size_t i) {
  for (;;) {
    int c = at(v, i);
    if (is_hspace(c)) i++;
    else if (c == '/' && at(v, i + 1) == '*') {
      size_t e = block_end(v, i);
      if (e == SIZE_MAX) {
        refuse(ck, v, i, "a /* comment", "it never ends");
        return v->n;
      }
      i = e;
    } else return i;
  }
}

static int starts(const char *s, size_t n, const char *p) {
  size_t k = strlen(p);
  return n >= k && !memcmp(s, p, k);
}

/* Why name (n bytes) is not in the world, or NULL when it is. */
static const char *outside(const checker *ck, const char *name, size_t n, int quoted) {
  if (n == 0) return "an empty file name";
  if (n > 1024) return "a file name over 1024 bytes";
  if (name[0] == '/') return "an absolute path";
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!(is_alpha(c) || is_digit(c) || c == '.' || c == '-' || c == '+' || c == '/'))
      return "a file name with characters other than letters, digits and _ . + - /";
  }
  for (size_t i = 0; i < n;) { /* each component: not empty, not . or .. */
    size_t e = i;
    while (e < n && name[e] != '/') e++;
    size_t cn = e - i;
    if (cn == 0) return "an empty path component";
    if ((cn == 1 && name[i] == '.') || (cn == 2 && name[i] == '.' && name[i + 1] == '.'))
      return "a '.' or '..' path component";
    i = e + 1;
  }
  for (size_t i = 0; i < ck->w->nheaders; i++) { /* NVRTC looks at these first, either form */
    const char *h = ck->w->headers[i].name;
    if (h && strlen(h) == n && !memcmp(h, name, n)) return NULL;
  }
  char path[4096 + 1100];
  struct stat tk, st;
  int found = 0;
  for (size_t i = 0; i < ck->w->ndirs && !found; i++) {
    snprintf(path, sizeof path, "%s/%.*s", ck->w->dirs[i], (int)n, name);
    found = stat(path, &tk) == 0 && S_ISREG(tk.st_mode);
  }
  if (!found) return "it is not a CUDA toolkit header, a kmrun built-in or a header given with the task";
  if (!quoted) return NULL;
  /* A quoted name is looked up first beside the including file — for an in-memory source,
   * in the working directory (or the folder its name has): a file there would be read in
   * place of the toolkit's. */
  const char *slash = strrchr(ck->file, '/');
  for (int k = 0; k < 2; k++) {
    if (k == 0) snprintf(path, sizeof path, "%.*s", (int)n, name);
    else if (slash) snprintf(path, sizeof path, "%.*s/%.*s", (int)(slash - ck->file), ck->file, (int)n, name);
    else break;
    if (stat(path, &st) == 0 && (st.st_dev != tk.st_dev || st.st_ino != tk.st_ino))
      return "a file of that name in the working directory (beside the source) would be read instead of "
             "the toolkit's; write it as <name>";
  }
  return NULL;
}

/* The directive whose '#' (hlen bytes: "#" or "%:") is at t[h]. */
static void directive(checker *ck, const view *v, size_t h, size_t hlen) {
  size_t p = skip_blank(ck, v, h + hlen);
  if (ck->refused) return;
  int exotic = 0, basic = 0;
  size_t k = ident_len(v, p, &exotic, &basic);
  if (!k) return;
  const char *name = v->t + p;
  if (exotic) {
    refuse(ck, v, h, "a directive", "its name is spelled with \\u escapes, '$' or non-ASCII bytes");
    return;
  }
  if (!starts(name, k, "include") && !starts(name, k, "import") && !starts(name, k, "embed")) return;
  char what[160], shown[40];
  printable(shown, sizeof shown, name, k, 24);
  if (k != 7 || !starts(name, k, "include")) {
    snprintf(what, sizeof what, "#%s", shown);
    refuse(ck, v, h, what, "only #include is allowed (no #include_next, #import or #embed)");
    return;
  }
  size_t q = skip_blank(ck, v, p + k);
  if (ck->refused) return;
  int open = at(v, q), close = open == '"' ? '"' : open == '<' ? '>' : 0;
  size_t e = q + 1;
  while (close && e < v->n && at(v, e) != close && at(v, e) != '\n') e++;
  if (!close || at(v, e) != close) {
    size_t ln = q;
    while (ln < v->n && v->t[ln] != '\n') ln++;
    char rest[80];
    printable(rest, sizeof rest, v->t + q, ln - q, 48);
    snprintf(what, sizeof what, "#include %s", rest);
    refuse(ck, v, h, what, "an include must name its file literally, as <name> or \"name\" (not through a macro)");
    return;
  }
  char nm[100];
  printable(nm, sizeof nm, v->t + q + 1, e - q - 1, 80);
  snprintf(what, sizeof what, "#include %c%s%c", open, nm, close);
  const char *why = outside(ck, v->t + q + 1, e - q - 1, open == '"');
  if (why) refuse(ck, v, h, what, why);
}

static void scan(checker *ck, const view *v) {
  size_t i = 0;
  while (i < v->n && !ck->refused) {
    int c = at(v, i), d = at(v, i + 1);
    if (c == '/' && d == '/') {
      while (i < v->n && v->t[i] != '\n') i++;
    } else if (c == '/' && d == '*') {
      size_t e = block_end(v, i);
      if (e == SIZE_MAX) refuse(ck, v, i, "a /* comment", "it never ends");
      i = e;
    } else if (c == '"' || c == '\'') {
      i = skip_quoted(v, i);
    } else if (is_digit(c) || (c == '.' && is_digit(d))) {
      i = skip_ppnum(v, i);
    } else if (c == '#' || (c == '%' && d == ':')) {
      size_t hl = c == '#' ? 1 : 2;
      directive(ck, v, i, hl);
      i += hl;
    } else {
      int exotic = 0, basic = 0;
      size_t k = ident_len(v, i, &exotic, &basic);
      if (!k) { i++; continue; }
      if (basic) {
        refuse(ck, v, i, "a \\u escape outside a literal", "it names a basic character (C++ forbids it; it could spell a directive)");
        return;
      }
      size_t j = i + k;
      int q = at(v, j);
      const char *id = v->t + i;
      if (q == '"' && id[k - 1] == 'R' && exotic) {
        refuse(ck, v, i, "a raw string prefix", "glued to '$', non-ASCII bytes or \\u escapes, it reads two ways");
        return;
      }
      int raw = q == '"' && ((k == 1 && id[0] == 'R') || (k == 3 && starts(id, k, "u8R")) ||
                             (k == 2 && id[1] == 'R' && strchr("uUL", id[0])));
      int enc = (q == '"' || q == '\'') && ((k == 1 && strchr("uUL", id[0])) || (k == 2 && starts(id, k, "u8")));
      if (raw) i = skip_raw(ck, v, j);
      else if (enc) i = skip_quoted(v, j);
      else i = j;
    }
  }
}

/* The reading bits that can change anything in s: the others are left at 0. */
static int relevant(const char *s, size_t n) {
  int rd = RD_RAW_REVERT;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '?' && i + 1 < n && s[i + 1] == '?') rd |= RD_TRIGRAPHS;
    else if (c == '\r') rd |= RD_CR_NEWLINE | RD_LOOSE_SPLICE;
    else if (c == '\\' && i + 1 < n && is_hspace((unsigned char)s[i + 1])) rd |= RD_LOOSE_SPLICE;
    else if (c == '\'') rd |= RD_DIGIT_SEP;
  }
  if (!memchr(s, 'R', n)) rd &= ~RD_RAW_REVERT;
  return rd;
}

int km_nvrtc_check_includes(const char *src, size_t len, const char *file, const km_nvrtc_world *w,
                            char *msg, size_t msgn) {
  if (msgn) msg[0] = '\0';
  if (!src || !w) return KM_EINVAL;
  checker ck = {w, file ? file : "kernel.cu", msg, msgn, 0};
  int rel = relevant(src, len);
  for (int rd = 0; rd <= RD_ALL && !ck.refused; rd++) {
    if (rd & ~rel) continue;
    view v;
    if (translate(src, len, rd, &v)) {
      view_free(&v);
      return KM_ENOMEM;
    }
    scan(&ck, &v);
    view_free(&v);
  }
  return ck.refused ? KM_EREFUSED : 0;
}
