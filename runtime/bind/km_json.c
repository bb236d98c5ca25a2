/* km_json.c — `require "km.json"`: JSON text <-> Lua values (docs/json.md).
 *
 *   json.encode(v [, {pretty=, sort_keys=true, nan=}]) -> string   (raises on misuse)
 *   json.decode(s)            -> value | nil, message, "JSON_PARSE"
 *   json.null, json.array(t), json.object(t), json.array_mt, json.object_mt
 *
 * Encoding writes text straight from the Lua values into a buffer owned by a userdata:
 * the value walk can raise anywhere (a bad key, a cycle, out of memory), and a cJSON tree
 * would need its own box and still could not hold strings with NUL bytes or exact int64s.
 *
 * Decoding lets cJSON check the grammar and build the tree (it owns the nesting limit and
 * the error position), then walks the tree in document order with a cursor over the input
 * text, because cJSON keeps neither the text of a number (only a double: integers beyond
 * 2^53 would change) nor the length of a string (a \u0000 would cut it short). The tree is
 * held by a userdata while the walk pushes Lua values, so a raise frees it. */
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>
#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_json.h"
#include "km_utf8_core.h"

#define ARRAY_MT "km.json.array"
#define OBJECT_MT "km.json.object"
#define ENCODER_MT "km.json.encoder"
#define TREE_MT "km.json.tree"

/* json.null is a light userdata with this address: unique, free, comparable with ==. */
static const char null_sentinel = 0;

_Static_assert(KM_JSON_MAX_DEPTH <= CJSON_NESTING_LIMIT,
               "decoded values must be encodable again");

/* ---- boxes: C memory owned by a userdata, freed by __gc if a raise skips the free ---- */

static void *new_box(lua_State *L, size_t size, const char *mt, lua_CFunction gc) {
  void *p = lua_newuserdatauv(L, size, 0);
  memset(p, 0, size);
  if (luaL_newmetatable(L, mt)) {
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return p;
}

typedef struct {
  cJSON *root;
} tree_box;

static int tree_gc(lua_State *L) {
  tree_box *t = lua_touserdata(L, 1);
  cJSON_Delete(t->root);
  t->root = NULL;
  return 0;
}

/* ---- text pieces shared by the encoder and km_json_add_* ---- */

/* Shortest of %.15g..%.17g that reads back as the same double; ".0" is added when the
 * text would look like an integer, so a float decodes as a float again. d is finite. */
static int format_float(char out[40], double d) {
  int len = 0;
  for (int prec = 15; prec <= 17; prec++) {
    len = snprintf(out, 40, "%.*g", prec, d);
    if (strtod(out, NULL) == d) break;
  }
  /* printf and strtod follow LC_NUMERIC (os.setlocale can change it); JSON wants '.'. */
  char point = localeconv()->decimal_point[0];
  if (point != '.' && point != '\0') {
    char *p = strchr(out, point);
    if (p) *p = '.';
  }
  if (strspn(out, "-0123456789") == (size_t)len) {
    out[len++] = '.';
    out[len++] = '0';
    out[len] = '\0';
  }
  return len;
}

/* Input is escaped in chunks so the output room needed stays small whatever the string's
 * size: at most 6 bytes per input byte (\u00XX, \ufffd), and a chunk may run up to 3 bytes
 * past its end to finish a UTF-8 sequence. Valid UTF-8 passes through as it is; each byte that
 * is not part of valid UTF-8 becomes \ufffd (U+FFFD), so the text is always valid UTF-8
 * whatever bytes a Lua string holds (docs/json.md). */
#define ESC_CHUNK 512
#define ESC_ROOM(k) (6 * ((k) + 3))

/* Escapes s[*at .. at+k) (and the rest of a sequence begun there) into dst; moves *at on. */
static size_t escape_chunk(char *dst, const unsigned char *s, size_t n, size_t *at, size_t k) {
  static const char hex[] = "0123456789abcdef";
  char *d = dst;
  size_t i = *at, end = i + k;
  while (i < end) {
    unsigned char c = s[i];
    if (c >= 0x80) {
      size_t len = km_utf8_seq(s + i, n - i);
      if (len) {
        memcpy(d, s + i, len);
        d += len;
        i += len;
      } else {
        memcpy(d, KM_UTF8_REPLACEMENT_ESC, 6);
        d += 6;
        i++;
      }
      continue;
    }
    i++;
    if (c >= 0x20 && c != '"' && c != '\\') {
      *d++ = (char)c;
      continue;
    }
    *d++ = '\\';
    switch (c) {
    case '"': *d++ = '"'; break;
    case '\\': *d++ = '\\'; break;
    case '\b': *d++ = 'b'; break;
    case '\f': *d++ = 'f'; break;
    case '\n': *d++ = 'n'; break;
    case '\r': *d++ = 'r'; break;
    case '\t': *d++ = 't'; break;
    default:
      *d++ = 'u'; *d++ = '0'; *d++ = '0';
      *d++ = hex[c >> 4];
      *d++ = hex[c & 15];
    }
  }
  *at = i;
  return (size_t)(d - dst);
}

void km_json_add_string(luaL_Buffer *b, const char *s, size_t n) {
  luaL_addchar(b, '"');
  for (size_t off = 0; off < n;) {
    size_t k = n - off < ESC_CHUNK ? n - off : ESC_CHUNK;
    char *d = luaL_prepbuffsize(b, ESC_ROOM(k));
    luaL_addsize(b, escape_chunk(d, (const unsigned char *)s, n, &off, k));
  }
  luaL_addchar(b, '"');
}

void km_json_add_float(luaL_Buffer *b, double d) {
  if (!isfinite(d)) {
    luaL_addstring(b, "null");
    return;
  }
  char tmp[40];
  luaL_addlstring(b, tmp, (size_t)format_float(tmp, d));
}

void km_json_add_integer(luaL_Buffer *b, long long i) {
  char tmp[32];
  luaL_addlstring(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%lld", i));
}

/* ---- encoder ---- */

/* Where the value being encoded sits, for error messages: $.config.shapes[2].n */
typedef struct {
  const void *table; /* the table at this level: meeting it again below is a cycle */
  int is_index;      /* key is an integer (array index or integer object key) */
  lua_Integer i;
  const char *s;     /* a string key; anchored by the table (or the sorted-key box) */
  size_t n;
} level;

/* Malloc'd (path[] is 40 KB, too much for a C stack frame) and owned by a box. */
typedef struct {
  lua_State *L;
  char *p; /* the text so far */
  size_t len, cap;
  int flags;
  const char *indent; /* NULL: compact */
  size_t indent_n;
  level path[KM_JSON_MAX_DEPTH];
} encoder;

static void encoder_free(encoder **box) {
  if (*box) {
    free((*box)->p);
    free(*box);
    *box = NULL;
  }
}

static int encoder_gc(lua_State *L) {
  encoder_free(lua_touserdata(L, 1));
  return 0;
}

static void out_reserve(encoder *e, size_t extra) {
  if (e->cap - e->len >= extra) return;
  size_t cap = e->cap ? e->cap : 256;
  while (cap - e->len < extra) {
    if (cap > SIZE_MAX / 2) luaL_error(e->L, "json: text too large");
    cap *= 2;
  }
  char *p = realloc(e->p, cap);
  if (!p) luaL_error(e->L, "json: not enough memory for %zu bytes of text", cap);
  e->p = p;
  e->cap = cap;
}

static void out_add(encoder *e, const char *s, size_t n) {
  out_reserve(e, n);
  memcpy(e->p + e->len, s, n);
  e->len += n;
}

#define out_lit(e, s) out_add((e), "" s, sizeof(s) - 1)

static void out_string(encoder *e, const char *s, size_t n) {
  out_lit(e, "\"");
  for (size_t off = 0; off < n;) {
    size_t k = n - off < ESC_CHUNK ? n - off : ESC_CHUNK;
    out_reserve(e, ESC_ROOM(k));
    e->len += escape_chunk(e->p + e->len, (const unsigned char *)s, n, &off, k);
  }
  out_lit(e, "\"");
}

static void out_newline(encoder *e, int depth) {
  if (!e->indent) return;
  out_lit(e, "\n");
  for (int i = 0; i < depth; i++) out_add(e, e->indent, e->indent_n);
}

/* Raises "json: <what> at $.a[1]": the path is the first `depth` levels. */
static void enc_error(encoder *e, int depth, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

static void enc_error(encoder *e, int depth, const char *fmt, ...) {
  char what[256], path[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_t p = (size_t)snprintf(path, sizeof path, "$");
  for (int d = 0; d < depth && p < sizeof path; d++) {
    const level *lv = &e->path[d];
    int ident = !lv->is_index && lv->n > 0 && lv->n <= 64 &&
                strspn(lv->s, "_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") >= lv->n &&
                !(lv->s[0] >= '0' && lv->s[0] <= '9');
    if (lv->is_index)
      p += (size_t)snprintf(path + p, sizeof path - p, "[%lld]", (long long)lv->i);
    else if (ident)
      p += (size_t)snprintf(path + p, sizeof path - p, ".%.*s", (int)lv->n, lv->s);
    else
      p += (size_t)snprintf(path + p, sizeof path - p, "[\"%.*s\"]",
                            (int)(lv->n > 64 ? 64 : lv->n), lv->s);
  }
  luaL_error(e->L, "json: %s at %s", what, path);
  abort(); /* not reached: luaL_error does not return */
}

static void encode_value(encoder *e, int idx, int depth);

/* 1 when the table at idx is written as an array; *count gets its number of keys.
 * json.array_mt forces an array (which must then be 1..n), json.object_mt an object;
 * otherwise keys exactly 1..n (n >= 1) make an array and anything else an object. */
static int table_is_array(encoder *e, int idx, int depth, lua_Integer *count) {
  lua_State *L = e->L;
  int forced = 0;
  if (lua_getmetatable(L, idx)) {         /* [mt] */
    luaL_getmetatable(L, ARRAY_MT);       /* [mt, array_mt] */
    luaL_getmetatable(L, OBJECT_MT);      /* [mt, array_mt, object_mt] */
    if (lua_rawequal(L, -3, -2)) forced = 1;
    else if (lua_rawequal(L, -3, -1)) forced = -1;
    lua_pop(L, 3);
  }
  lua_Integer n = 0, max = 0;
  int all_index = 1;
  lua_pushnil(L);
  while (lua_next(L, idx)) {              /* [key, value] */
    lua_pop(L, 1);
    n++;
    if (all_index) {
      lua_Integer k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
      if (k < 1) all_index = 0;
      else if (k > max) max = k;
    }
  }
  *count = n;
  if (forced < 0) return 0;
  if (forced > 0) {
    if (!all_index) enc_error(e, depth, "table marked with json.array has a non-index key");
    if (max != n) enc_error(e, depth, "sparse array: table marked with json.array has holes "
                                      "(%lld keys, largest index %lld); use json.null",
                            (long long)n, (long long)max);
    return 1;
  }
  return n > 0 && all_index && max == n;
}

/* An object key as text: strings as they are, integers in decimal (in ibuf: qsort moves
 * the entries, so an integer key's text is found through key_text, never a stored pointer). */
typedef struct {
  const char *s; /* string keys only */
  size_t n;
  int is_int;
  lua_Integer i;
  char ibuf[24];
} keyent;

static const char *key_text(const keyent *k) { return k->is_int ? k->ibuf : k->s; }

static int keyent_cmp(const void *a, const void *b) {
  const keyent *x = a, *y = b;
  int c = memcmp(key_text(x), key_text(y), x->n < y->n ? x->n : y->n);
  if (c) return c;
  return (x->n > y->n) - (x->n < y->n);
}

/* Reads the key on the top of the stack into k; raises for keys JSON cannot hold. */
static void read_key(encoder *e, int depth, keyent *k) {
  lua_State *L = e->L;
  if (lua_type(L, -1) == LUA_TSTRING) {
    k->is_int = 0;
    k->s = lua_tolstring(L, -1, &k->n);
  } else if (lua_isinteger(L, -1)) {
    k->is_int = 1;
    k->i = lua_tointeger(L, -1);
    k->n = (size_t)snprintf(k->ibuf, sizeof k->ibuf, "%lld", (long long)k->i);
    k->s = NULL;
  } else {
    enc_error(e, depth, "object keys must be strings or integers, not %s%s",
              lua_type(L, -1) == LUA_TNUMBER ? "a float " : "",
              lua_type(L, -1) == LUA_TNUMBER ? "number" : luaL_typename(L, -1));
  }
}

static void emit_member(encoder *e, int depth, int first, const keyent *k) {
  if (!first) out_lit(e, ",");
  out_newline(e, depth + 1);
  out_string(e, key_text(k), k->n);
  if (e->indent) out_lit(e, ": ");
  else out_lit(e, ":");
  level *lv = &e->path[depth];
  lv->is_index = k->is_int;
  lv->i = k->i;
  lv->s = k->s;
  lv->n = k->n;
}

static void encode_table(encoder *e, int idx, int depth) {
  lua_State *L = e->L;
  if (depth >= KM_JSON_MAX_DEPTH)
    enc_error(e, depth, "nesting deeper than %d levels", KM_JSON_MAX_DEPTH);
  const void *self = lua_topointer(L, idx);
  for (int d = 0; d < depth; d++)
    if (e->path[d].table == self) enc_error(e, depth, "cycle: a table contains itself");
  luaL_checkstack(L, 6, "json: nesting too deep");
  e->path[depth].table = self;

  lua_Integer n;
  if (table_is_array(e, idx, depth, &n)) {
    out_lit(e, "[");
    for (lua_Integer i = 1; i <= n; i++) {
      if (i > 1) out_lit(e, ",");
      out_newline(e, depth + 1);
      e->path[depth].is_index = 1;
      e->path[depth].i = i;
      lua_rawgeti(L, idx, i);
      encode_value(e, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
    }
    if (n > 0) out_newline(e, depth);
    out_lit(e, "]");
    return;
  }

  out_lit(e, "{");
  if (!(e->flags & KM_JSON_SORT_KEYS)) {
    int first = 1;
    keyent k;
    lua_pushnil(L);
    while (lua_next(L, idx)) {              /* [key, value] */
      lua_pushvalue(L, -2);                 /* [key, value, key]: read_key reads the top */
      read_key(e, depth, &k);
      lua_pop(L, 1);
      emit_member(e, depth, first, &k);
      first = 0;
      encode_value(e, lua_gettop(L), depth + 1);
      lua_pop(L, 1);                        /* [key] */
    }
    if (!first) out_newline(e, depth);
  } else if (n > 0) {
    /* Sorted keys: collect them into a userdata (freed by the GC if a raise comes). */
    if ((size_t)n > SIZE_MAX / sizeof(keyent)) luaL_error(L, "json: table too large");
    keyent *ks = lua_newuserdatauv(L, (size_t)n * sizeof(keyent), 0);   /* [keys] */
    int kidx = lua_gettop(L);
    lua_Integer m = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {              /* [keys, key, value] */
      lua_pop(L, 1);
      if (m == n) { lua_pop(L, 1); break; } /* the table grew under us: a __gc ran */
      read_key(e, depth, &ks[m]);
      m++;
    }
    qsort(ks, (size_t)m, sizeof *ks, keyent_cmp);
    for (lua_Integer j = 0; j < m; j++) {
      if (j > 0 && keyent_cmp(&ks[j - 1], &ks[j]) == 0)
        enc_error(e, depth, "duplicate key \"%.*s\" (an integer key and a string key)",
                  (int)(ks[j].n > 64 ? 64 : ks[j].n), key_text(&ks[j]));
      emit_member(e, depth, j == 0, &ks[j]);
      if (ks[j].is_int) lua_pushinteger(L, ks[j].i);
      else lua_pushlstring(L, ks[j].s, ks[j].n);
      lua_rawget(L, idx);                   /* [keys, value] */
      encode_value(e, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
    }
    lua_remove(L, kidx);
    if (m > 0) out_newline(e, depth);
  }
  out_lit(e, "}");
}

static void encode_value(encoder *e, int idx, int depth) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    out_lit(e, "null");
    return;
  case LUA_TBOOLEAN:
    if (lua_toboolean(L, idx)) out_lit(e, "true");
    else out_lit(e, "false");
    return;
  case LUA_TNUMBER: {
    char tmp[40];
    if (lua_isinteger(L, idx)) {
      out_add(e, tmp, (size_t)snprintf(tmp, sizeof tmp, LUA_INTEGER_FMT, lua_tointeger(L, idx)));
      return;
    }
    double d = (double)lua_tonumber(L, idx);
    if (!isfinite(d)) {
      if (e->flags & KM_JSON_NAN_NULL) { out_lit(e, "null"); return; }
      enc_error(e, depth, "cannot encode %s (JSON has no NaN or infinity; "
                          "opts.nan = \"null\" writes null)",
                isnan(d) ? "NaN" : d > 0 ? "inf" : "-inf");
    }
    out_add(e, tmp, (size_t)format_float(tmp, d));
    return;
  }
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    out_string(e, s, n);
    return;
  }
  case LUA_TLIGHTUSERDATA:
    if (lua_touserdata(L, idx) == &null_sentinel) {
      out_lit(e, "null");
      return;
    }
    break;
  case LUA_TTABLE:
    encode_table(e, idx, depth);
    return;
  }
  enc_error(e, depth, "cannot encode a %s", luaL_typename(L, idx));
}

static void push_encoded(lua_State *L, int idx, int flags, const char *indent, size_t indent_n) {
  idx = lua_absindex(L, idx);
  encoder **box = new_box(L, sizeof *box, ENCODER_MT, encoder_gc);  /* [box] */
  encoder *e = *box = malloc(sizeof *e);
  if (!e) luaL_error(L, "json: not enough memory");
  e->L = L;
  e->p = NULL;
  e->len = e->cap = 0;
  e->flags = flags;
  e->indent = indent;
  e->indent_n = indent_n;
  encode_value(e, idx, 0);
  lua_pushlstring(L, e->p ? e->p : "", e->len);                            /* [box, text] */
  encoder_free(box); /* now, rather than at some later GC cycle */
  lua_remove(L, -2);                                                        /* [text] */
}

void km_json_push_encoded(lua_State *L, int idx, int flags) {
  push_encoded(L, idx, flags, NULL, 0);
}

/* ---- decoder ---- */

typedef struct {
  lua_State *L;
  const char *s;
  size_t n;
  size_t pos; /* cursor: the next string or number token is at or after it */
} decoder;

/* cJSON has checked the grammar, so between string and number tokens there is only
 * whitespace, punctuation and the letters of true/false/null: skip to the next token. */
static size_t next_token(decoder *d) {
  while (d->pos < d->n) {
    char c = d->s[d->pos];
    if (c == '"' || c == '-' || (c >= '0' && c <= '9')) return d->pos;
    d->pos++;
  }
  return luaL_error(d->L, "json: internal error: decoder lost its place in the text");
}

static unsigned hex4(const char *p) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

static void add_utf8(luaL_Buffer *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) { u[0] = (char)cp; n = 1; }
  else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
  else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
  }
  luaL_addlstring(b, u, n);
}

/* Pushes the string token at the cursor (which is on its opening quote) and moves past it. */
static void push_string_token(decoder *d) {
  const char *s = d->s;
  size_t start = next_token(d) + 1, end = start;
  int escaped = 0;
  while (end < d->n && s[end] != '"') {
    if (s[end] == '\\') { escaped = 1; end++; }
    end++;
  }
  if (end > d->n) end = d->n;
  d->pos = end + 1;
  if (!escaped) {
    lua_pushlstring(d->L, s + start, end - start);
    return;
  }
  luaL_Buffer b;
  luaL_buffinit(d->L, &b);
  size_t p = start;
  while (p < end) {
    size_t q = p;
    while (q < end && s[q] != '\\') q++;
    luaL_addlstring(&b, s + p, q - p);
    if (q + 1 >= end) break;
    char c = s[q + 1];
    p = q + 2;
    switch (c) {
    case 'b': luaL_addchar(&b, '\b'); break;
    case 'f': luaL_addchar(&b, '\f'); break;
    case 'n': luaL_addchar(&b, '\n'); break;
    case 'r': luaL_addchar(&b, '\r'); break;
    case 't': luaL_addchar(&b, '\t'); break;
    case 'u': {
      if (p + 4 > end) { p = end; break; }
      unsigned cp = hex4(s + p);
      p += 4;
      /* cJSON rejects lone surrogates, so a high one is followed by its low half. */
      if (cp >= 0xD800 && cp <= 0xDBFF && p + 6 <= end && s[p] == '\\' && s[p + 1] == 'u') {
        unsigned lo = hex4(s + p + 2);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          p += 6;
        }
      }
      add_utf8(&b, cp);
      break;
    }
    default: luaL_addchar(&b, c); /* \" \\ \/ */
    }
  }
  luaL_pushresult(&b);
}

/* Pushes the number token at the cursor: Lua's own rules give an integer for digits
 * without '.', 'e' or 'E' that fit in 64 bits, and a float otherwise. */
static void push_number_token(decoder *d, double fallback) {
  size_t start = next_token(d), end = start;
  while (end < d->n && d->s[end] && strchr("0123456789+-.eE", d->s[end])) end++;
  d->pos = end;
  char tmp[64];
  size_t len = end - start;
  if (len < sizeof tmp) {
    memcpy(tmp, d->s + start, len);
    tmp[len] = '\0';
    if (lua_stringtonumber(d->L, tmp) != 0) return;
  }
  lua_pushnumber(d->L, fallback); /* very long token: cJSON's strtod is as good as ours */
}

static void decode_value(decoder *d, const cJSON *item) {
  lua_State *L = d->L;
  luaL_checkstack(L, 4, "json: nesting too deep");
  switch (item->type & 0xFF) {
  case cJSON_False: lua_pushboolean(L, 0); return;
  case cJSON_True: lua_pushboolean(L, 1); return;
  case cJSON_NULL: lua_pushlightuserdata(L, (void *)&null_sentinel); return;
  case cJSON_Number: push_number_token(d, item->valuedouble); return;
  case cJSON_String: push_string_token(d); return;
  case cJSON_Array: {
    int n = cJSON_GetArraySize(item);
    lua_createtable(L, n, 0);                 /* [t] */
    lua_Integer i = 1;
    for (const cJSON *c = item->child; c; c = c->next) {
      decode_value(d, c);                     /* [t, v] */
      lua_rawseti(L, -2, i++);
    }
    luaL_setmetatable(L, ARRAY_MT);
    return;
  }
  case cJSON_Object: {
    int n = cJSON_GetArraySize(item);
    lua_createtable(L, 0, n);                 /* [t] */
    for (const cJSON *c = item->child; c; c = c->next) {
      push_string_token(d);                   /* [t, k] */
      decode_value(d, c);                     /* [t, k, v]; a repeated key: the last wins */
      lua_rawset(L, -3);
    }
    return;
  }
  }
  luaL_error(L, "json: internal error: unexpected cJSON item type %d", item->type);
}

/* What the prefix s[0..pos) leaves open: arrays/objects, and the string (if any) that pos
 * is inside. cJSON failed at pos, so the prefix is good JSON and a plain scan reads it. */
typedef struct {
  size_t depth;
  int in_string;
  size_t string_start;
} scan_state;

static scan_state scan_prefix(const char *s, size_t pos) {
  scan_state st = {0, 0, 0};
  for (size_t i = 0; i < pos; i++) {
    char c = s[i];
    if (st.in_string) {
      if (c == '\\') i++;
      else if (c == '"') st.in_string = 0;
    } else if (c == '"') {
      st.in_string = 1;
      st.string_start = i;
    } else if (c == '[' || c == '{') st.depth++;
    else if ((c == ']' || c == '}') && st.depth > 0) st.depth--;
  }
  return st;
}

/* cJSON says only where it stopped; name the likely reason from the text around it. */
static int parse_error(lua_State *L, const char *s, size_t n, size_t pos, const char *why) {
  char what[96];
  unsigned char c = pos < n ? (unsigned char)s[pos] : 0;
  scan_state st = why ? (scan_state){0, 0, 0} : scan_prefix(s, pos);
  if (why) snprintf(what, sizeof what, "%s", why);
  else if (st.in_string || (c == '"' && pos < n)) {
    size_t q = st.in_string ? st.string_start : pos, i = q + 1;
    while (i < n && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
    if (i >= n) {
      snprintf(what, sizeof what, "unterminated string");
      pos = q;
    } else if (c == '\\' && pos + 1 < n && s[pos + 1] == 'u') {
      snprintf(what, sizeof what, "invalid \\u escape (bad hex digits or a lone surrogate)");
    } else if (c == '\\' && pos + 1 < n) {
      snprintf(what, sizeof what, "invalid escape '\\%c'", s[pos + 1] > 0x20 ? s[pos + 1] : '?');
    } else {
      snprintf(what, sizeof what, "invalid string");
    }
  } else if (pos >= n) snprintf(what, sizeof what, "unexpected end of input");
  else if ((c == '[' || c == '{') && st.depth + 1 >= CJSON_NESTING_LIMIT)
    snprintf(what, sizeof what, "nesting deeper than %d levels", CJSON_NESTING_LIMIT);
  else if (c > 0x20 && c < 0x7F) snprintf(what, sizeof what, "unexpected '%c'", c);
  else snprintf(what, sizeof what, "unexpected byte 0x%02x", c);
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < n; i++) {
    if (s[i] == '\n') { line++; col = 1; }
    else col++;
  }
  /* km_fail formats with lua_pushvfstring: %I is lua_Integer, there is no %zu */
  return km_fail(L, "JSON_PARSE", "json: %s at line %I column %I (byte %I)", what,
                 (lua_Integer)line, (lua_Integer)col, (lua_Integer)pos + 1);
}

/* s[n] must be readable and '\0' (Lua strings and sqlite3_column_text are): cJSON is given
 * n + 1 bytes so that running off the end shows as an error at byte n, not at n - 1. */
int km_json_push_decoded(lua_State *L, const char *s, size_t n) {
  tree_box *t = new_box(L, sizeof *t, TREE_MT, tree_gc);   /* [box] */
  const char *end = NULL;
  t->root = cJSON_ParseWithLengthOpts(s, n + 1, &end, 0);
  if (!t->root) {
    lua_pop(L, 1);
    return parse_error(L, s, n, end ? (size_t)(end - s) : 0, NULL);
  }
  size_t pos = (size_t)(end - s);
  while (pos < n && (unsigned char)s[pos] <= 0x20) pos++;   /* cJSON's idea of whitespace */
  if (pos < n) {
    lua_pop(L, 1); /* the box's __gc frees the tree */
    return parse_error(L, s, n, pos, "unexpected text after the value");
  }
  decoder d = {L, s, n, 0};
  decode_value(&d, t->root);                                  /* [box, value] */
  cJSON_Delete(t->root);
  t->root = NULL;
  lua_remove(L, -2);
  return 1;
}

void km_json_push_null(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&null_sentinel);
}

int km_json_is_null(lua_State *L, int idx) {
  return lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == &null_sentinel;
}

void km_json_push_array_mt(lua_State *L) {
  luaL_newmetatable(L, ARRAY_MT);
}

/* ---- the Lua module ---- */

static int json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  int flags = KM_JSON_SORT_KEYS;
  const char *indent = NULL;
  size_t indent_n = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!km_optfield_bool(L, 2, "sort_keys", 1)) flags &= ~KM_JSON_SORT_KEYS;
    const char *nan = km_optfield_str(L, 2, "nan", NULL);
    if (nan) {
      luaL_argcheck(L, strcmp(nan, "null") == 0, 2, "option 'nan' must be \"null\" or nil");
      flags |= KM_JSON_NAN_NULL;
    }
    static const char spaces[] = "                "; /* 16 */
    switch (lua_getfield(L, 2, "pretty")) {      /* [.., pretty] stays: anchors a string */
    case LUA_TNIL: break;
    case LUA_TBOOLEAN:
      if (lua_toboolean(L, -1)) { indent = spaces; indent_n = 2; }
      break;
    case LUA_TNUMBER: {
      lua_Integer k = luaL_checkinteger(L, -1);
      luaL_argcheck(L, k >= 0 && k <= 16, 2, "option 'pretty' must be 0..16 spaces");
      indent = spaces;
      indent_n = (size_t)k;
      break;
    }
    case LUA_TSTRING:
      indent = lua_tolstring(L, -1, &indent_n);
      break;
    default:
      luaL_argerror(L, 2, "option 'pretty' must be a boolean, a number of spaces or a string");
    }
  }
  push_encoded(L, 1, flags, indent, indent_n);
  return 1;
}

static int json_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  return km_json_push_decoded(L, s, n);
}

static int set_mt(lua_State *L, const char *mt) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, mt);
  return 1;
}

static int json_array(lua_State *L) { return set_mt(L, ARRAY_MT); }
static int json_object(lua_State *L) { return set_mt(L, OBJECT_MT); }

int luaopen_km_json(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"encode", json_encode}, {"decode", json_decode},
      {"array", json_array},   {"object", json_object},
      {NULL, NULL}};
  luaL_newlib(L, fns);
  km_json_push_null(L);
  lua_setfield(L, -2, "null");
  luaL_newmetatable(L, ARRAY_MT);
  lua_setfield(L, -2, "array_mt");
  luaL_newmetatable(L, OBJECT_MT);
  lua_setfield(L, -2, "object_mt");
  return 1;
}
