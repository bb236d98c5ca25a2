/* km_nvrtc_scan_core.c — the extern "C" __global__ kernel signature scanner (see
 * km_nvrtc_scan_core.h). No lua_State, no mutable globals: every function works on what its
 * caller passes, so it runs on the compile threads too. */
#include <stdlib.h>
#include <string.h>

#include "km.h"
#include "km_nvrtc_scan_core.h"

/* ======================================================================================
 * Kernel signatures: a small C++ tokenizer (comments, string/char/raw literals and
 * preprocessor lines skipped) and a scanner that recognises extern "C" __global__
 * declarations, with or without a body, alone or inside extern "C" { } blocks.
 * ==================================================================================== */

enum { T_EOF, T_IDENT, T_NUM, T_STR, T_CHAR, T_PUNCT };

typedef struct tok {
  int type;
  const char *p;
  size_t n;
} tok;

typedef struct lexer {
  const char *s, *end;
  int bol; /* only whitespace since the last newline: a '#' starts a directive */
} lexer;

static int is_ident_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_ident_char(int c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

int km_nvrtc_is_identifier(const char *s) {
  if (!s || !is_ident_start((unsigned char)*s)) return 0;
  for (s++; *s; s++)
    if (!is_ident_char((unsigned char)*s)) return 0;
  return 1;
}

/* Skips a quoted literal starting at the opening quote; stops at an unescaped newline
 * too, so one stray quote cannot swallow the rest of the file. */
static const char *skip_quoted(const char *s, const char *end, char q) {
  s++;
  while (s < end && *s != q && *s != '\n') {
    if (*s == '\\' && s + 1 < end) s++;
    s++;
  }
  return s < end && *s == q ? s + 1 : s;
}

/* R"delim( ... )delim" with s at the opening quote. */
static const char *skip_raw(const char *s, const char *end) {
  const char *d = ++s;
  while (s < end && *s != '(' && *s != '"' && *s != '\n' && s - d <= 16) s++;
  if (s >= end || *s != '(') return s; /* malformed: resume scanning after it */
  size_t dn = (size_t)(s - d);
  for (s++; s < end; s++) {
    if (*s == ')' && (size_t)(end - s) > dn + 1 && !memcmp(s + 1, d, dn) && s[1 + dn] == '"')
      return s + dn + 2;
  }
  return end;
}

/* s at a block comment's opening: -> past its close (the end of the text where it is not closed). */
static const char *skip_block_comment(const char *s, const char *end) {
  s += 2;
  while (s + 1 < end && !(s[0] == '*' && s[1] == '/')) s++;
  return s + 1 < end ? s + 2 : end;
}

/* Skips whitespace, comments and preprocessor directives (a '#' at the start of a line, with
 * its continuation lines), noting line starts in L->bol. -> where the next token starts. */
static const char *skip_blank(lexer *L, const char *s) {
  const char *end = L->end;
  for (;;) {
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\f' || *s == '\v' ||
                       *s == '\n')) {
      if (*s == '\n') L->bol = 1;
      s++;
    }
    if (s + 1 < end && s[0] == '/' && s[1] == '/') {
      while (s < end && *s != '\n') s++;
      continue;
    }
    if (s + 1 < end && s[0] == '/' && s[1] == '*') {
      s = skip_block_comment(s, end);
      continue;
    }
    if (s < end && *s == '#' && L->bol) { /* a directive, with its continuation lines */
      while (s < end && *s != '\n') {
        if (*s == '\\' && s + 1 < end && s[1] == '\n') s += 2;
        else if (*s == '\\' && s + 2 < end && s[1] == '\r' && s[2] == '\n') s += 3;
        else if (s + 1 < end && s[0] == '/' && s[1] == '*') s = skip_block_comment(s, end);
        else s++;
      }
      continue;
    }
    return s;
  }
}

/* An identifier starting at b, or an encoding prefix glued to the literal that follows it
 * (u8"..", L'x', R"(..)"), which is then one string or character token. Sets t's type and
 * length; -> the token's end. */
static const char *lex_ident(const char *b, const char *end, tok *t) {
  const char *s = b;
  while (s < end && is_ident_char((unsigned char)*s)) s++;
  size_t n = (size_t)(s - b);
  if (s < end && (*s == '"' || *s == '\'')) {
    int raw = b[n - 1] == 'R' && *s == '"';
    int pre = (n == 1 && (*b == 'u' || *b == 'U' || *b == 'L' || *b == 'R')) ||
              (n == 2 && (!memcmp(b, "u8", 2) || (b[1] == 'R' && strchr("uUL", *b)))) ||
              (n == 3 && !memcmp(b, "u8R", 3));
    if (pre) {
      char q = *s;
      s = raw ? skip_raw(s, end) : skip_quoted(s, end, q);
      t->type = q == '"' ? T_STR : T_CHAR;
      t->n = (size_t)(s - b);
      return s;
    }
  }
  t->type = T_IDENT;
  t->n = n;
  return s;
}

static tok lex_next(lexer *L) {
  const char *end = L->end;
  const char *s = skip_blank(L, L->s);
  tok t = {T_EOF, s, 0};
  if (s >= end) { L->s = s; return t; }
  L->bol = 0;
  const char *b = s;
  if (is_ident_start((unsigned char)*s)) {
    s = lex_ident(b, end, &t);
  } else if (is_digit((unsigned char)*s) || (*s == '.' && s + 1 < end && is_digit((unsigned char)s[1]))) {
    /* pp-number: digits, letters, '.', digit separators, and signs after an exponent */
    while (s < end) {
      char c = *s;
      if ((c == '+' || c == '-') && strchr("eEpP", s[-1])) s++;
      else if (is_ident_char((unsigned char)c) || c == '.' || c == '\'') s++;
      else break;
    }
    t.type = T_NUM;
    t.n = (size_t)(s - b);
  } else if (*s == '"' || *s == '\'') {
    char q = *s;
    s = skip_quoted(s, end, q);
    t.type = q == '"' ? T_STR : T_CHAR;
    t.n = (size_t)(s - b);
  } else if (*s == ':' && s + 1 < end && s[1] == ':') {
    s += 2;
    t.type = T_PUNCT;
    t.n = 2;
  } else {
    s++;
    t.type = T_PUNCT;
    t.n = 1;
  }
  L->s = s;
  return t;
}

static int tok_is(const tok *t, const char *s) {
  size_t n = strlen(s);
  return t->n == n && !memcmp(t->p, s, n);
}

static int tok_punct(const tok *t, char c) { return t->type == T_PUNCT && t->n == 1 && *t->p == c; }

/* The token stream, fully lexed up front so the scanner can look ahead freely. */
typedef struct toks {
  tok *v;
  size_t n, cap;
} toks;

static int toks_push(toks *a, tok t) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 256;
    tok *v = realloc(a->v, cap * sizeof *v);
    if (!v) return KM_ENOMEM;
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = t;
  return 0;
}

static int lex_all(const char *src, size_t len, toks *out) {
  lexer L = {src, src + len, 1};
  for (;;) {
    tok t = lex_next(&L);
    if (toks_push(out, t)) return KM_ENOMEM;
    if (t.type == T_EOF) return 0;
  }
}

/* ---- parameter kinds ---- */

static int is_qualifier(const tok *t) {
  static const char *const q[] = {"const", "volatile", "__restrict__", "__restrict", "restrict",
                                  "__grid_constant__", "struct", "class", "union", "enum",
                                  "typename", NULL};
  if (t->type != T_IDENT) return 0;
  for (int i = 0; q[i]; i++)
    if (tok_is(t, q[i])) return 1;
  return 0;
}

static int is_builtin_word(const tok *t) {
  static const char *const w[] = {"void", "char", "short", "int", "long", "float", "double",
                                  "signed", "unsigned", "bool", NULL};
  if (t->type != T_IDENT) return 0;
  for (int i = 0; w[i]; i++)
    if (tok_is(t, w[i])) return 1;
  return 0;
}

/* Kind of a parameter from its type tokens (the name already removed). */
static const char *kind_of(const tok *v, size_t n) {
  static const struct { const char *name, *kind; } typedefs[] = {
      {"__half", "f16"},        {"half", "f16"},          {"__nv_bfloat16", "bf16"},
      {"nv_bfloat16", "bf16"},  {"int8_t", "i8"},         {"uint8_t", "u8"},
      {"int16_t", "i16"},       {"uint16_t", "u16"},      {"int32_t", "i32"},
      {"uint32_t", "u32"},      {"int64_t", "i64"},       {"uint64_t", "u64"},
      {"ptrdiff_t", "i64"},     {"intptr_t", "i64"},      {"ssize_t", "i64"},
      {"size_t", "u64"},        {"uintptr_t", "u64"},
  };
  int nlong = 0, nunsigned = 0, nsigned = 0, nshort = 0, nchar = 0, nint = 0, nfloat = 0,
      ndouble = 0, nwords = 0, nother = 0;
  const tok *other = NULL;
  for (size_t i = 0; i < n; i++) {
    const tok *t = &v[i];
    if (tok_punct(t, '*') || tok_punct(t, '[')) return "ptr";
    if (t->type == T_PUNCT) {
      if (tok_is(t, "::")) continue; /* std::size_t and ::size_t are size_t */
      return "unknown";             /* references, templates, function types */
    }
    if (t->type != T_IDENT) return "unknown";
    if (is_qualifier(t)) continue;
    if (tok_is(t, "std") && i + 1 < n && tok_is(&v[i + 1], "::")) continue;
    nwords++;
    if (tok_is(t, "long")) nlong++;
    else if (tok_is(t, "unsigned")) nunsigned++;
    else if (tok_is(t, "signed")) nsigned++;
    else if (tok_is(t, "short")) nshort++;
    else if (tok_is(t, "char")) nchar++;
    else if (tok_is(t, "int")) nint++;
    else if (tok_is(t, "float")) nfloat++;
    else if (tok_is(t, "double")) ndouble++;
    else { nother++; other = t; }
  }
  if (nwords == 1 && nother == 1) {
    for (size_t i = 0; i < sizeof typedefs / sizeof *typedefs; i++)
      if (tok_is(other, typedefs[i].name)) return typedefs[i].kind;
    return "unknown";
  }
  if (nother || nwords == 0) return "unknown";
  if (nfloat || ndouble) return nwords == 1 ? (nfloat ? "f32" : "f64") : "unknown";
  if (nunsigned + nsigned > 1 || nchar + nshort > 1 || nlong > 2 ||
      (nchar && (nlong || nint)) || (nshort && nlong))
    return "unknown";
  int u = nunsigned > 0;
  if (nchar) return u ? "u8" : "i8";
  if (nshort) return u ? "u16" : "i16";
  if (nlong) return u ? "u64" : "i64"; /* long is 64-bit on the LP64 hosts CUDA runs on */
  return u ? "u32" : "i32";
}

const char *km_nvrtc_kind(const char *type) {
  toks a = {0};
  if (!type || lex_all(type, strlen(type), &a)) { free(a.v); return "unknown"; }
  const char *k = kind_of(a.v, a.n - 1); /* without the EOF token */
  free(a.v);
  return k;
}

/* Maps a kind read back from a cache entry to its static string. */
const char *km_nvrtc_intern_kind(const char *s, size_t n) {
  static const char *const kinds[] = {"ptr", "f32", "f64", "f16", "bf16", "i8",  "u8",
                                      "i16", "u16", "i32", "u32", "i64",  "u64", NULL};
  for (int i = 0; kinds[i]; i++)
    if (strlen(kinds[i]) == n && !memcmp(kinds[i], s, n)) return kinds[i];
  return "unknown";
}

/* ---- type text ---- */

/* Joins tokens with single spaces, except where C++ is normally written tight:
 * "const float * __restrict__", "float **", "std::size_t", "Vec<int, 4>", "float[4]". */
static char *join_tokens(const tok *v, size_t n) {
  size_t cap = 1;
  for (size_t i = 0; i < n; i++) cap += v[i].n + 1;
  char *s = malloc(cap), *w = s;
  if (!s) return NULL;
  for (size_t i = 0; i < n; i++) {
    const tok *t = &v[i], *p = i ? &v[i - 1] : NULL;
    int space = p != NULL;
    if (p && (tok_punct(t, ',') || tok_punct(t, '>') || tok_punct(t, '[') || tok_punct(t, ']') ||
              tok_punct(t, ')') || tok_is(t, "::")))
      space = 0;
    if (p && (tok_punct(p, '<') || tok_punct(p, '(') || tok_punct(p, '[') || tok_is(p, "::")))
      space = 0;
    if (p && (tok_punct(p, '*') || tok_punct(p, '&')) && (tok_punct(t, '*') || tok_punct(t, '&')))
      space = 0;
    if (space) *w++ = ' ';
    memcpy(w, t->p, t->n);
    w += t->n;
  }
  *w = '\0';
  return s;
}

/* ---- the scanner ---- */

static void kernel_clear(km_nvrtc_kernel *k) {
  for (size_t i = 0; i < k->nparams; i++) {
    free(k->params[i].name);
    free(k->params[i].type);
  }
  free(k->params);
  free(k->name);
  memset(k, 0, sizeof *k);
}

void km_nvrtc_kernels_free(km_nvrtc_kernels *ks) {
  if (!ks) return;
  for (size_t i = 0; i < ks->n; i++) kernel_clear(&ks->v[i]);
  free(ks->v);
  ks->v = NULL;
  ks->n = 0;
}

/* One parameter from its tokens [b, e): drops a default argument, splits off the name,
 * keeps an array suffix in the type. */
static int parse_param(const tok *b, const tok *e, km_nvrtc_param *out) {
  const tok *eq = b;
  int depth = 0;
  for (; eq < e; eq++) { /* a default argument starts at a top-level '=' */
    if (tok_punct(eq, '(') || tok_punct(eq, '<') || tok_punct(eq, '[')) depth++;
    else if ((tok_punct(eq, ')') || tok_punct(eq, '>') || tok_punct(eq, ']')) && depth) depth--;
    else if (depth == 0 && tok_punct(eq, '=')) break;
  }
  e = eq;
  const tok *arr = e; /* trailing [..] groups */
  while (arr > b && tok_punct(arr - 1, ']')) {
    const tok *q = arr - 1;
    while (q > b && !tok_punct(q, '[')) q--;
    if (!tok_punct(q, '[')) break;
    arr = q;
  }
  const tok *name = NULL;
  if (arr > b && arr[-1].type == T_IDENT && !is_builtin_word(&arr[-1]) && !is_qualifier(&arr[-1])) {
    for (const tok *q = b; q < arr - 1; q++)
      if (!is_qualifier(q)) { name = arr - 1; break; } /* a type word comes before it */
  }
  /* The type is everything but the name (and the __grid_constant__ annotation). */
  size_t n = 0;
  tok buf[256];
  for (const tok *q = b; q < e && n < sizeof buf / sizeof *buf; q++)
    if (q != name && !tok_is(q, "__grid_constant__")) buf[n++] = *q;
  out->type = join_tokens(buf, n);
  out->name = name ? strndup(name->p, name->n) : strdup("");
  out->kind = kind_of(buf, n);
  if (!out->type || !out->name) return KM_ENOMEM;
  return 0;
}

/* The parameter list between the parentheses at v[lp] and v[rp]. */
static int parse_params(const tok *v, size_t lp, size_t rp, km_nvrtc_kernel *k) {
  size_t cap = 0;
  if (rp == lp + 1 || (rp == lp + 2 && tok_is(&v[lp + 1], "void"))) return 0;
  size_t start = lp + 1;
  int depth = 0;
  for (size_t i = lp + 1; i <= rp; i++) {
    const tok *t = &v[i];
    if (i < rp && (tok_punct(t, '(') || tok_punct(t, '[') || tok_punct(t, '{') || tok_punct(t, '<'))) {
      depth++;
      continue;
    }
    if (i < rp && (tok_punct(t, ')') || tok_punct(t, ']') || tok_punct(t, '}') || tok_punct(t, '>'))) {
      if (depth) depth--;
      continue;
    }
    if (i == rp || (depth == 0 && tok_punct(t, ','))) {
      if (k->nparams == cap) {
        cap = cap ? cap * 2 : 8;
        km_nvrtc_param *p = realloc(k->params, cap * sizeof *p);
        if (!p) return KM_ENOMEM;
        k->params = p;
      }
      km_nvrtc_param *p = &k->params[k->nparams];
      memset(p, 0, sizeof *p);
      k->nparams++;
      if (parse_param(&v[start], &v[i], p)) return KM_ENOMEM;
      start = i + 1;
    }
  }
  return 0;
}

/* Index of the token closing the group opened at v[i], or n when unbalanced. */
static size_t match_close(const tok *v, size_t n, size_t i, char open, char close) {
  int depth = 0;
  for (; i < n; i++) {
    if (tok_punct(&v[i], open)) depth++;
    else if (tok_punct(&v[i], close) && --depth == 0) return i;
  }
  return n;
}

static int add_kernel(km_nvrtc_kernels *ks, size_t *cap, km_nvrtc_kernel *k) {
  for (size_t i = 0; i < ks->n; i++) /* a definition after a declaration replaces it */
    if (!strcmp(ks->v[i].name, k->name)) {
      kernel_clear(&ks->v[i]);
      ks->v[i] = *k;
      return 0;
    }
  if (ks->n == *cap) {
    size_t c = *cap ? *cap * 2 : 8;
    km_nvrtc_kernel *v = realloc(ks->v, c * sizeof *v);
    if (!v) return KM_ENOMEM;
    ks->v = v;
    *cap = c;
  }
  ks->v[ks->n++] = *k;
  return 0;
}

#define KM_MAX_NEST 256

static int scan(const tok *v, size_t n, km_nvrtc_kernels *ks) {
  /* Linkage per brace level: 1 = C (inside extern "C" { }), 0 = C++. Deeper levels than
   * the table are function bodies or worse, where no kernel can be declared anyway. */
  unsigned char clink[KM_MAX_NEST];
  int depth = 0;
  clink[0] = 0;
  int d_externc = 0, d_global = 0, d_template = 0; /* the current declaration so far */
  size_t cap = 0;
  for (size_t i = 0; i < n && v[i].type != T_EOF; i++) {
    const tok *t = &v[i];
    if (t->type == T_IDENT && tok_is(t, "extern") && v[i + 1].type == T_STR) {
      const tok *lit = &v[i + 1];
      int c = tok_is(lit, "\"C\"");
      if (tok_punct(&v[i + 2], '{')) { /* extern "C" { ... } */
        depth++;
        if (depth < KM_MAX_NEST) clink[depth] = (unsigned char)c;
        d_externc = d_global = d_template = 0;
        i += 2;
      } else {
        d_externc = c;
        i += 1;
      }
      continue;
    }
    if (tok_punct(t, '{')) {
      depth++;
      if (depth < KM_MAX_NEST) clink[depth] = clink[depth - 1];
      d_externc = d_global = d_template = 0;
      continue;
    }
    if (tok_punct(t, '}')) {
      if (depth) depth--;
      d_externc = d_global = d_template = 0;
      continue;
    }
    if (tok_punct(t, ';')) {
      d_externc = d_global = d_template = 0;
      continue;
    }
    if (t->type != T_IDENT) continue;
    if (tok_is(t, "__global__")) { d_global = 1; continue; }
    if (tok_is(t, "template")) { d_template = 1; continue; }
    if (!tok_punct(&v[i + 1], '(')) continue;
    /* NAME( ... ): the kernel when a body or ';' follows; otherwise an attribute such as
     * __launch_bounds__(256) or a macro, and the declaration goes on after it. */
    size_t rp = match_close(v, n, i + 1, '(', ')');
    if (rp >= n) break;
    int linkage_c = d_externc || (depth < KM_MAX_NEST ? clink[depth] : 0);
    if (d_global && !d_template && linkage_c &&
        (tok_punct(&v[rp + 1], '{') || tok_punct(&v[rp + 1], ';'))) {
      km_nvrtc_kernel k = {0};
      k.name = strndup(t->p, t->n);
      if (!k.name || parse_params(v, i + 1, rp, &k) || add_kernel(ks, &cap, &k)) {
        kernel_clear(&k);
        return KM_ENOMEM;
      }
    }
    i = rp;
  }
  return 0;
}

int km_nvrtc_parse_kernels(const char *src, size_t len, km_nvrtc_kernels *out) {
  memset(out, 0, sizeof *out);
  toks a = {0};
  int rc = src ? lex_all(src, len, &a) : KM_EINVAL;
  /* Three EOF tokens of look-ahead so v[i + 2] is always in bounds. */
  if (!rc) rc = toks_push(&a, a.v[a.n - 1]);
  if (!rc) rc = toks_push(&a, a.v[a.n - 1]);
  if (!rc) rc = scan(a.v, a.n, out);
  free(a.v);
  if (rc) km_nvrtc_kernels_free(out);
  return rc;
}
