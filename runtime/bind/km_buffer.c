/* km_buffer.c — `require "km.buffer"`: typed device buffers with guard zones.
 *
 * Every allocation is [guard | data | pad + guard]; both guards are filled with GUARD_BYTE
 * when the buffer is made and check_guards() reads them back, so a kernel that writes
 * before or past its output is caught. The data pointer stays 256-byte aligned.
 *
 * Ownership: a km.Buffer owns its device allocation; :free(), __gc and __close release it
 * once; a freed buffer used again raises. Device work goes to km.cuda's current stream. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_util.h"
#include "km_buffer.h"
#include "km_devops.h"
#include "km_dtype.h"

#define KM_BUFFER_MT "km.Buffer"
#define GUARD_BYTE KM_GUARD_BYTE
#define DEFAULT_GUARD KM_DEFAULT_GUARD

/* The device side (allocation, guards, fills) is km_devops.c's, shared with the C API. */
typedef km_devbuf km_buffer;

static km_buffer *buffer_check(lua_State *L, int idx) {
  km_buffer *b = luaL_checkudata(L, idx, KM_BUFFER_MT);
  if (!b->base) luaL_error(L, "attempt to use a freed km.Buffer");
  return b;
}

static const void *buffer_mt; /* identity of the metatable, for the launch hot path */

/* ---- views: what launch code sees ----
 * A km.BufferView is the second, C-side method table of a buffer: its facts (dtype,
 * shape, sizes) and its use as a launch argument, nothing else — no pointer, no host
 * copies, no fills, no guards, no free. A view is valid only until the next
 * buffer.revoke_views(): the judge revokes every view after each launch call, so a handle
 * kept by launch code from an earlier call is refused, not silently used. The view pins
 * its buffer with a user value. */
#define KM_VIEW_MT "km.BufferView"
typedef struct {
  km_buffer *b;
  uint64_t epoch;
} km_view;
static uint64_t view_epoch = 1;
static const void *view_mt;

/* The buffer behind the view at idx, or NULL when idx is not a view; raises on a stale
 * view or a freed buffer. */
static km_buffer *view_buffer(lua_State *L, int idx) {
  km_view *v = lua_touserdata(L, idx);
  if (!v || !lua_getmetatable(L, idx)) return NULL;
  int is_view = lua_topointer(L, -1) == view_mt;
  lua_pop(L, 1);
  if (!is_view) return NULL;
  if (v->epoch != view_epoch)
    luaL_error(L, "a buffer kept from an earlier launch call: buffers are valid only during the call that received them");
  if (!v->b->base) luaL_error(L, "attempt to use a freed km.Buffer");
  return v->b;
}

CUdeviceptr km_buffer_ptr(lua_State *L, int idx, size_t *bytes) {
  km_buffer *b = lua_touserdata(L, idx);
  if (!b || !lua_getmetatable(L, idx)) return 0;
  const void *mt = lua_topointer(L, -1);
  lua_pop(L, 1);
  if (mt == view_mt) b = view_buffer(L, idx);
  else if (mt != buffer_mt) return 0;
  if (!b->base) luaL_error(L, "attempt to use a freed km.Buffer");
  if (bytes) *bytes = b->bytes;
  return b->ptr;
}

static int buffer_release(lua_State *L) {
  km_devbuf_free(luaL_checkudata(L, 1, KM_BUFFER_MT));
  return 0;
}

static void check(lua_State *L, CUresult r, const char *what) {
  if (r != CUDA_SUCCESS) km_cuda_raise(L, r, what);
}

/* Reads a shape: an integer n, or a table {d1, d2, ...}. */
static void read_shape(lua_State *L, int idx, km_buffer *b) {
  b->numel = 1;
  if (lua_isinteger(L, idx)) {
    b->ndim = 1;
    b->shape[0] = lua_tointeger(L, idx);
  } else if (lua_istable(L, idx)) {
    b->ndim = (int)lua_rawlen(L, idx);
    if (b->ndim > KM_MAXDIM) luaL_argerror(L, idx, "more than 8 dimensions");
    for (int i = 0; i < b->ndim; i++) {
      lua_rawgeti(L, idx, i + 1);
      if (!lua_isinteger(L, -1)) luaL_argerror(L, idx, "shape entries must be integers");
      b->shape[i] = lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
  } else {
    luaL_argerror(L, idx, "shape must be an integer or a table of integers");
  }
  for (int i = 0; i < b->ndim; i++) {
    if (b->shape[i] < 0) luaL_argerror(L, idx, "negative dimension");
    if (b->shape[i] && b->numel > INT64_MAX / b->shape[i]) luaL_argerror(L, idx, "shape too large");
    b->numel *= b->shape[i];
  }
}

static km_dtype check_dtype(lua_State *L, int idx) {
  const char *name = luaL_checkstring(L, idx);
  int t = km_dtype_parse(name);
  if (t < 0) luaL_argerror(L, idx, lua_pushfstring(L, "unknown dtype '%s' (f32 f64 f16 bf16 i8 i32 i64 u8)", name));
  return (km_dtype)t;
}

static km_buffer *alloc_buffer(lua_State *L, km_dtype dt, int shape_idx, size_t guard) {
  const km_cuda_api *cu = km_cuda_check(L);
  km_buffer tmp;
  memset(&tmp, 0, sizeof tmp);
  read_shape(L, shape_idx, &tmp);
  const char *why = NULL;
  int64_t shape[KM_MAXDIM];
  memcpy(shape, tmp.shape, sizeof shape);
  if (km_devbuf_init(&tmp, dt, shape, tmp.ndim, guard, &why)) luaL_argerror(L, shape_idx, why);
  km_buffer *b = lua_newuserdatauv(L, sizeof *b, 0); /* created "freed": nothing leaks */
  *b = tmp;
  b->base = b->ptr = 0;
  luaL_setmetatable(L, KM_BUFFER_MT);
  (void)cu;
  km_devbuf d = tmp;
  CUresult r = km_devbuf_alloc(&d);
  if (r != CUDA_SUCCESS && !d.base) {
    luaL_error(L, "%s: allocating %I bytes for a %s buffer: %s", km_cuda_errname(r),
               (lua_Integer)tmp.alloc, km_dtype_name(dt), km_cuda_errstr(r));
  }
  *b = d; /* owned by the userdata from here: a guard failure below frees it with it */
  check(L, r, "filling the guards");
  return b;
}

/* buffer.new(dtype, shape [, {guard = bytes}]) */
static int l_new(lua_State *L) {
  km_dtype dt = check_dtype(L, 1);
  size_t guard = (size_t)km_optfield_int(L, 3, "guard", DEFAULT_GUARD);
  alloc_buffer(L, dt, 2, guard);
  return 1;
}

/* ---- info ---- */

static int b_dtype(lua_State *L) { lua_pushstring(L, km_dtype_name(buffer_check(L, 1)->dtype)); return 1; }
static int b_numel(lua_State *L) { lua_pushinteger(L, buffer_check(L, 1)->numel); return 1; }
static int b_nbytes(lua_State *L) { lua_pushinteger(L, (lua_Integer)buffer_check(L, 1)->bytes); return 1; }
static int b_ptr(lua_State *L) { lua_pushinteger(L, (lua_Integer)buffer_check(L, 1)->ptr); return 1; }
static int b_elsize(lua_State *L) { lua_pushinteger(L, (lua_Integer)km_dtype_size(buffer_check(L, 1)->dtype)); return 1; }

static int b_shape(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  lua_createtable(L, b->ndim, 0);
  for (int i = 0; i < b->ndim; i++) {
    lua_pushinteger(L, b->shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int b_freed(lua_State *L) {
  km_buffer *b = luaL_checkudata(L, 1, KM_BUFFER_MT);
  lua_pushboolean(L, b->base == 0);
  return 1;
}

static int b_tostring(lua_State *L) {
  km_buffer *b = luaL_checkudata(L, 1, KM_BUFFER_MT);
  if (!b->base) { lua_pushliteral(L, "km.Buffer (freed)"); return 1; }
  luaL_Buffer sb;
  luaL_buffinit(L, &sb);
  lua_pushfstring(L, "km.Buffer %s[", km_dtype_name(b->dtype));
  luaL_addvalue(&sb);
  for (int i = 0; i < b->ndim; i++) {
    lua_pushfstring(L, i ? "x%I" : "%I", (lua_Integer)b->shape[i]);
    luaL_addvalue(&sb);
  }
  luaL_addstring(&sb, "]");
  luaL_pushresult(&sb);
  return 1;
}

/* ---- fills ---- */

/* Writes `elsize`-byte `pattern` into every element. */
static void fill_pattern(lua_State *L, km_buffer *b, uint64_t pattern) {
  if (km_dtype_size(b->dtype) == 8 && b->numel) km_cuda_util(L, "km_fill64"); /* raises as before */
  check(L, km_devbuf_fill_pattern(b, pattern, km_cuda_stream()), "fill");
}

static uint64_t pattern_of(km_dtype dt, double v) { return km_devbuf_pattern(dt, v); }

/* b:fill(value) -> b */
static int b_fill(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  uint64_t p;
  if (b->dtype == KM_I64 && lua_isinteger(L, 2)) {
    int64_t v = lua_tointeger(L, 2);
    memcpy(&p, &v, 8);
  } else p = pattern_of(b->dtype, luaL_checknumber(L, 2));
  fill_pattern(L, b, p);
  lua_settop(L, 1);
  return 1;
}

static int b_zero(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  fill_pattern(L, b, 0);
  lua_settop(L, 1);
  return 1;
}

/* b:poison() -> b: km_poison_pattern (km_dtype_core.c) in every element.
 * b:poison{ sparse = seed } -> b: in one 128-byte line of every 4 KiB block, drawn from the
 * seed (a buffer under 64 KiB whole): km_devbuf_poison_sparse. */
static int b_poison(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "sparse");
    int isint = 0;
    lua_Integer seed = lua_tointegerx(L, -1, &isint);
    if (!isint) return luaL_error(L, "poison: sparse must be an integer seed");
    lua_pop(L, 1);
    if (b->bytes >= KM_SPARSE_POISON_MIN) {
      km_cuda_util(L, "km_poison_sparse");
      check(L, km_devbuf_poison_sparse(b, (uint64_t)seed, km_cuda_stream()), "poison");
      lua_settop(L, 1);
      return 1;
    }
  }
  fill_pattern(L, b, km_poison_pattern(b->dtype));
  lua_settop(L, 1);
  return 1;
}

/* The law of b:random's and b:random_check's table at index 2: dist (0 uniform, 1 normal,
 * 2 integers), its two numbers and the seed. */
static void random_law(lua_State *L, int idx, km_buffer *b, int *d, double *a, double *c, uint64_t *seed) {
  const char *dist = km_optfield_str(L, idx, "dist", "uniform");
  if (!strcmp(dist, "uniform")) {
    *d = 0;
    *a = km_optfield_num(L, idx, "lo", km_dtype_is_float(b->dtype) ? -1.0 : 0.0);
    *c = km_optfield_num(L, idx, "hi", km_dtype_is_float(b->dtype) ? 1.0 : 10.0);
    if (!km_dtype_is_float(b->dtype)) *d = 2, *c = *c - 1; /* integers in [lo, hi) */
  } else if (!strcmp(dist, "normal")) {
    *d = 1;
    *a = km_optfield_num(L, idx, "mean", 0.0);
    *c = km_optfield_num(L, idx, "std", 1.0);
  } else if (!strcmp(dist, "int")) {
    *d = 2;
    *a = km_optfield_num(L, idx, "lo", 0.0);
    *c = km_optfield_num(L, idx, "hi", 10.0); /* inclusive */
    if (*c < *a) luaL_error(L, "random: hi (%f) < lo (%f)", *c, *a);
  } else {
    luaL_error(L, "random: unknown dist '%s' (uniform, normal, int)", dist);
  }
  *seed = (uint64_t)km_optfield_int(L, idx, "seed", 0);
}

/* b:random{ dist = "uniform"|"normal"|"int", lo, hi, mean, std, seed } -> b
 * Generated on the GPU; element i depends only on (seed, i). */
static int b_random(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  int d;
  double a, c;
  uint64_t seed;
  random_law(L, 2, b, &d, &a, &c, &seed);
  if (!b->numel) { lua_settop(L, 1); return 1; }
  km_cuda_util(L, "km_random");
  check(L, km_devbuf_random(b, d, a, c, seed, km_cuda_stream()), "random");
  lua_settop(L, 1);
  return 1;
}

/* b:random_check{ the same table as b:random } -> n: how many elements differ (bitwise) from
 * what b:random with that table writes. One read of b, no second copy; waits for the stream. */
static int b_random_check(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  int d;
  double a, c;
  uint64_t seed, bad = 0;
  random_law(L, 2, b, &d, &a, &c, &seed);
  if (b->numel) {
    km_cuda_util(L, "km_random_check");
    check(L, km_devbuf_random_check(b, d, a, c, seed, km_cuda_stream(), &bad), "random_check");
  }
  lua_pushinteger(L, (lua_Integer)bad);
  return 1;
}

/* dst:copy(src) -> dst (same byte size; any dtypes) */
static int b_copy(lua_State *L) {
  km_buffer *d = buffer_check(L, 1), *s = buffer_check(L, 2);
  if (d->bytes != s->bytes)
    return luaL_error(L, "copy: sizes differ (%I bytes into %I bytes)", (lua_Integer)s->bytes, (lua_Integer)d->bytes);
  if (d->bytes) check(L, km_cu->cuMemcpyDtoDAsync(d->ptr, s->ptr, d->bytes, km_cuda_stream()), "copy");
  lua_settop(L, 1);
  return 1;
}

/* b:clone() -> a new buffer with the same dtype, shape and contents */
static int b_clone(lua_State *L) {
  km_buffer *s = buffer_check(L, 1);
  lua_createtable(L, s->ndim, 0);
  for (int i = 0; i < s->ndim; i++) {
    lua_pushinteger(L, s->shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  km_buffer *d = alloc_buffer(L, s->dtype, lua_gettop(L), s->guard);
  if (d->bytes) check(L, km_cu->cuMemcpyDtoDAsync(d->ptr, s->ptr, d->bytes, km_cuda_stream()), "clone");
  return 1;
}

/* ---- host transfers ---- */

/* b:to_string() -> the raw little-endian bytes */
static int b_to_string(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  luaL_Buffer sb;
  char *p = luaL_buffinitsize(L, &sb, b->bytes);
  if (b->bytes) check(L, km_cu->cuMemcpyDtoH(p, b->ptr, b->bytes), "copy to host");
  luaL_pushresultsize(&sb, b->bytes);
  return 1;
}

/* b:from_string(bytes) -> b */
static int b_from_string(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  if (len != b->bytes)
    return luaL_error(L, "from_string: %I bytes given for a buffer of %I bytes", (lua_Integer)len, (lua_Integer)b->bytes);
  if (len) check(L, km_cu->cuMemcpyHtoD(b->ptr, s, len), "copy from host");
  lua_settop(L, 1);
  return 1;
}

/* b:to_table([max]) -> { numbers } (integers for integer dtypes) */
static int b_to_table(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  int64_t n = luaL_optinteger(L, 2, b->numel);
  if (n > b->numel) n = b->numel;
  if (n < 0) n = 0;
  size_t es = km_dtype_size(b->dtype);
  luaL_Buffer sb;
  char *p = luaL_buffinitsize(L, &sb, (size_t)n * es);
  if (n) check(L, km_cu->cuMemcpyDtoH(p, b->ptr, (size_t)n * es), "copy to host");
  luaL_pushresultsize(&sb, (size_t)n * es); /* [b, max?, bytes] */
  const char *bytes = lua_tostring(L, -1);
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 0; i < n; i++) {
    if (b->dtype == KM_I64) {
      int64_t v;
      memcpy(&v, bytes + i * 8, 8);
      lua_pushinteger(L, v);
    } else if (!km_dtype_is_float(b->dtype)) {
      lua_pushinteger(L, (lua_Integer)km_dtype_get(b->dtype, bytes, (size_t)i));
    } else {
      lua_pushnumber(L, km_dtype_get(b->dtype, bytes, (size_t)i));
    }
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* b:from_table(t) -> b; #t must equal numel */
static int b_from_table(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  if (n != b->numel)
    return luaL_error(L, "from_table: %I values given for a buffer of %I elements", n, (lua_Integer)b->numel);
  size_t es = km_dtype_size(b->dtype);
  luaL_Buffer sb;
  char *p = luaL_buffinitsize(L, &sb, (size_t)n * es);
  for (lua_Integer i = 0; i < n; i++) {
    lua_rawgeti(L, 2, i + 1);
    int isnum;
    if (b->dtype == KM_I64 && lua_isinteger(L, -1)) {
      int64_t v = lua_tointeger(L, -1);
      memcpy(p + i * 8, &v, 8);
    } else {
      lua_Number v = lua_tonumberx(L, -1, &isnum);
      if (!isnum) return luaL_error(L, "from_table: element %I is %s, not a number", i + 1, luaL_typename(L, -1));
      km_dtype_set(b->dtype, p, (size_t)i, v);
    }
    lua_pop(L, 1);
  }
  if (n) check(L, km_cu->cuMemcpyHtoD(b->ptr, p, (size_t)n * es), "copy from host");
  lua_settop(L, 1);
  return 1;
}

/* ---- files: raw little-endian, or .npy (version 1.0) ---- */

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* b:save(path) -> true | nil, msg, code */
static int b_save(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  const char *path = luaL_checkstring(L, 2);
  int npy = ends_with(path, ".npy");
  luaL_Buffer hb;
  luaL_buffinit(L, &hb);
  if (npy) {
    const char *descr = km_dtype_npy(b->dtype);
    if (!descr) return luaL_error(L, "save: %s has no .npy type; save it raw (not .npy)", km_dtype_name(b->dtype));
    lua_pushfstring(L, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    /* numpy's own spelling: (n,) for one dimension, (a, b) for more */
    for (int i = 0; i < b->ndim; i++) {
      lua_pushfstring(L, "%I%s", (lua_Integer)b->shape[i],
                      b->ndim == 1 ? "," : i + 1 < b->ndim ? ", " : "");
      lua_concat(L, 2);
    }
    lua_pushliteral(L, "), }");
    lua_concat(L, 2);
    size_t hl;
    lua_tolstring(L, -1, &hl);
    size_t total = 10 + hl + 1, pad = (64 - total % 64) % 64;
    char pre[10] = {(char)0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    uint16_t hlen = (uint16_t)(hl + pad + 1);
    pre[8] = (char)(hlen & 0xff);
    pre[9] = (char)(hlen >> 8);
    lua_pushlstring(L, pre, 10);
    lua_pushvalue(L, -2);
    for (size_t i = 0; i < pad; i++) lua_pushliteral(L, " "), lua_concat(L, 2);
    lua_pushliteral(L, "\n");
    lua_concat(L, 3); /* [.., dict, header] */
    lua_remove(L, -2);
  } else {
    lua_pushliteral(L, "");
  }
  int hidx = lua_gettop(L);
  lua_pushcfunction(L, b_to_string);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  FILE *f = fopen(path, "wb");
  if (!f) return km_fail(L, "EIO", "cannot write %s: %s", path, strerror(errno));
  size_t hl, dl;
  const char *h = lua_tolstring(L, hidx, &hl), *d = lua_tolstring(L, -1, &dl);
  int ok = fwrite(h, 1, hl, f) == hl && fwrite(d, 1, dl, f) == dl;
  ok = (fclose(f) == 0) && ok;
  if (!ok) return km_fail(L, "EIO", "writing %s: %s", path, strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

/* Parses a .npy header dict: descr, fortran_order, shape. Returns NULL or an error. */
static const char *parse_npy(const char *h, size_t n, char *descr, int *fortran, int64_t *shape, int *ndim) {
  const char *d = strstr(h, "'descr'"), *fo = strstr(h, "'fortran_order'"), *sh = strstr(h, "'shape'");
  if (!d || !fo || !sh || (size_t)(sh - h) > n) return "malformed .npy header";
  if (sscanf(d, "'descr': '%15[^']'", descr) != 1) return "malformed descr in .npy header";
  *fortran = strstr(fo, "True") && strstr(fo, "True") < strstr(fo, ",") ? 1 : 0;
  const char *p = strchr(sh, '(');
  if (!p) return "malformed shape in .npy header";
  p++;
  *ndim = 0;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) return "malformed shape in .npy header";
    if (*ndim >= KM_MAXDIM) return "more than 8 dimensions";
    shape[(*ndim)++] = v;
    p = end;
  }
  return NULL;
}

/* buffer.load(path [, dtype, shape]) -> buffer | nil, msg, code
 * .npy files carry dtype and shape; raw files need both. */
static int l_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  FILE *f = fopen(path, "rb");
  if (!f) return km_fail(L, "EIO", "cannot open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  luaL_Buffer sb;
  char *p = luaL_buffinitsize(L, &sb, (size_t)(size > 0 ? size : 0));
  size_t got = size > 0 ? fread(p, 1, (size_t)size, f) : 0;
  fclose(f);
  if ((long)got != size) return km_fail(L, "EIO", "reading %s: short read", path);
  luaL_pushresultsize(&sb, got);
  int data = lua_gettop(L);
  const char *bytes = lua_tostring(L, data);
  size_t off = 0;
  km_dtype dt;
  if (got >= 10 && (unsigned char)bytes[0] == 0x93 && !memcmp(bytes + 1, "NUMPY", 5)) {
    int major = bytes[6];
    size_t hl = major == 1 ? (size_t)((unsigned char)bytes[8] | (unsigned char)bytes[9] << 8)
                           : (size_t)((unsigned char)bytes[8] | (unsigned char)bytes[9] << 8 |
                                      (unsigned char)bytes[10] << 16 | (unsigned char)bytes[11] << 24);
    size_t hstart = major == 1 ? 10 : 12;
    if (hstart + hl > got) return km_fail(L, "ECORRUPT", "%s: truncated .npy header", path);
    char descr[16];
    int fortran, ndim;
    int64_t shape[KM_MAXDIM];
    lua_pushlstring(L, bytes + hstart, hl);
    const char *err = parse_npy(lua_tostring(L, -1), hl, descr, &fortran, shape, &ndim);
    lua_pop(L, 1);
    if (err) return km_fail(L, "ECORRUPT", "%s: %s", path, err);
    if (fortran) return km_fail(L, "EINVAL", "%s: Fortran-order arrays are not supported", path);
    int found = -1;
    for (int t = 0; t < KM_NDTYPES; t++)
      if (km_dtype_npy((km_dtype)t) && !strcmp(km_dtype_npy((km_dtype)t), descr)) found = t;
    if (found < 0) return km_fail(L, "EINVAL", "%s: unsupported .npy dtype '%s'", path, descr);
    dt = (km_dtype)found;
    off = hstart + hl;
    lua_createtable(L, ndim, 0);
    for (int i = 0; i < ndim; i++) {
      lua_pushinteger(L, shape[i]);
      lua_rawseti(L, -2, i + 1);
    }
  } else {
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "load: %s is not .npy; give a dtype and shape", path);
    dt = check_dtype(L, 2);
    if (lua_isnoneornil(L, 3)) {
      lua_pushinteger(L, (lua_Integer)(got / km_dtype_size(dt)));
    } else lua_pushvalue(L, 3);
  }
  km_buffer *b = alloc_buffer(L, dt, lua_gettop(L), DEFAULT_GUARD);
  if (got - off != b->bytes)
    return km_fail(L, "ECORRUPT", "%s: %I data bytes for a shape needing %I", path, (lua_Integer)(got - off), (lua_Integer)b->bytes);
  if (b->bytes) check(L, km_cu->cuMemcpyHtoD(b->ptr, bytes + off, b->bytes), "copy from host");
  return 1;
}

/* ---- integrity ---- */

/* b:checksum() -> 16 hex digits (order-sensitive 64-bit hash of the bytes, on the GPU) */
static int b_checksum(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  km_cuda_util(L, "km_checksum");
  uint64_t out = 0;
  check(L, km_devbuf_checksum(b, km_cuda_stream(), &out), "checksum");
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)out);
  lua_pushstring(L, hex);
  return 1;
}

/* buffer.lines_copy(full, compact, lines, "gather" | "scatter") -> compact: the lines a
 * sample { key, shift, bytes } draws from `full` (km_lines; bytes: a task's rows), into
 * `compact` in order, or from it back into full's lines; enqueued on kmrun's stream. compact
 * must hold buffer.lines_drawn(full:nbytes(), lines) bytes. */
static int l_lines_copy(lua_State *L) {
  km_buffer *full = buffer_check(L, 1), *compact = buffer_check(L, 2);
  km_lines l;
  km_check_lines(L, 3, 3, &l);
  static const char *const dirs[] = {"gather", "scatter", NULL};
  int scatter = luaL_checkoption(L, 4, NULL, dirs);
  uint64_t need = km_lines_drawn_bytes(&l, full->bytes);
  if (compact->bytes < need)
    return luaL_error(L, "lines_copy: %llu bytes drawn into a buffer of %llu", (unsigned long long)need,
                      (unsigned long long)compact->bytes);
  km_cuda_check(L);
  km_cuda_util(L, "km_lines_copy");
  check(L, km_devlines_copy(full->ptr, compact->ptr, full->bytes, &l, scatter, km_cuda_stream()), "lines_copy");
  lua_settop(L, 2);
  return 1;
}

/* buffer.lines_drawn(nbytes, lines) -> bytes: how many bytes the sample draws from a buffer
 * of nbytes (the compact copy's length; host arithmetic, no GPU). */
static int l_lines_drawn(lua_State *L) {
  lua_Integer nb = luaL_checkinteger(L, 1);
  luaL_argcheck(L, nb >= 0, 1, "a byte count expected");
  km_lines l;
  km_check_lines(L, 2, 2, &l);
  lua_pushinteger(L, (lua_Integer)km_lines_drawn_bytes(&l, (uint64_t)nb));
  return 1;
}

/* buffer.copy_in(b, ptr, nbytes[, key]) -> b: the raw device range [ptr, ptr + nbytes) into
 * b, on kmrun's stream; nbytes must be b's size. Memory kmrun does not own, such as a
 * PyTorch model's parameters: km.judge hands them to a timed call this way, without Python.
 * key (an integer): each floating element times its factor drawn from (key, index) instead
 * (km_devbuf_perturb_at; ptr may be b's own: perturbed in place). */
static int l_copy_in(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  lua_Integer p = luaL_checkinteger(L, 2), nb = luaL_checkinteger(L, 3);
  luaL_argcheck(L, p > 0, 2, "a device pointer expected");
  if ((size_t)nb != b->bytes || nb < 0)
    return luaL_error(L, "copy_in: %lld bytes into a buffer of %llu", (long long)nb, (unsigned long long)b->bytes);
  km_cuda_check(L);
  if (!lua_isnoneornil(L, 4)) {
    uint64_t key = (uint64_t)luaL_checkinteger(L, 4);
    km_cuda_util(L, "km_perturb");
    check(L, km_devbuf_perturb_at(b, (CUdeviceptr)p, key, km_cuda_stream(), 0), "copy_in (perturbed)");
  } else if (nb) {
    check(L, km_cu->cuMemcpyDtoDAsync(b->ptr, (CUdeviceptr)p, (size_t)nb, km_cuda_stream()), "copy_in");
  }
  lua_settop(L, 1);
  return 1;
}

/* buffer.digest({ { ptr, nbytes }, ... }) -> { d1, d2, ... }: the keyed digest (as
 * b:checksum's, integers) of raw device ranges — memory kmrun does not own, such as a
 * PyTorch model's parameters (km.judge's proof that a reference's state did not move). */
/* The ranges { { ptr, nbytes }, ... } at idx into a boxed array (pushed): ptrs[n], bytes[n],
 * then n more slots for results. Returns n. */
static lua_Integer read_ranges(lua_State *L, int idx, CUdeviceptr **ptrs, uint64_t **bytes) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer n = luaL_len(L, idx);
  luaL_argcheck(L, n >= 0 && n <= (1 << 20), idx, "too many ranges");
  uint64_t *box = lua_newuserdatauv(L, (size_t)(n ? n : 1) * 3 * sizeof(uint64_t), 0);
  *ptrs = (CUdeviceptr *)box;
  *bytes = box + n;
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    luaL_argcheck(L, lua_istable(L, -1), idx, "each range is { ptr, nbytes }");
    lua_geti(L, -1, 1);
    lua_geti(L, -2, 2);
    int okp, okn;
    lua_Integer p = lua_tointegerx(L, -2, &okp), nb = lua_tointegerx(L, -1, &okn);
    luaL_argcheck(L, okp && okn && p >= 0 && nb >= 0, idx, "each range is { ptr, nbytes } of integers");
    (*ptrs)[i - 1] = (CUdeviceptr)p;
    (*bytes)[i - 1] = (uint64_t)nb;
    lua_pop(L, 3);
  }
  return n;
}

static int l_digest(lua_State *L) {
  km_cuda_util(L, "km_checksum");
  CUdeviceptr *ptrs;
  uint64_t *bytes;
  lua_Integer n = read_ranges(L, 1, &ptrs, &bytes); /* boxed: freed by the collector if anything below raises */
  uint64_t *out = bytes + n;
  check(L, km_dev_digest(ptrs, bytes, (size_t)n, km_cuda_stream(), out), "digest");
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_pushinteger(L, (lua_Integer)out[i - 1]);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* buffer.live() -> count, bytes, peak: device buffers allocated in this process now, and
 * the most bytes live at once since buffer.reset_peak() */
static int l_live(lua_State *L) {
  long long n, bytes;
  km_devbuf_live(&n, &bytes);
  lua_pushinteger(L, (lua_Integer)n);
  lua_pushinteger(L, (lua_Integer)bytes);
  lua_pushinteger(L, (lua_Integer)km_devbuf_peak());
  return 3;
}

/* buffer.reset_peak(): the peak from now (the bytes live now) */
static int l_reset_peak(lua_State *L) {
  (void)L;
  km_devbuf_reset_peak();
  return 0;
}

/* b:check_guards() -> true | false, "message naming the side and the first bad offset" */
static int b_check_guards(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  int ok, side;
  size_t count, off;
  check(L, km_devbuf_check_guards(b, &ok, &side, &count, &off), "reading the guards");
  lua_pushboolean(L, ok);
  if (ok) return 1;
  if (side == 0)
    lua_pushfstring(L, "front guard overwritten: %I byte(s), the nearest %I byte(s) before the start of the buffer",
                    (lua_Integer)count, (lua_Integer)off);
  else
    lua_pushfstring(L, "back guard overwritten: %I byte(s), the first at byte %I past the end of the buffer (element %I)",
                    (lua_Integer)count, (lua_Integer)off, (lua_Integer)(b->numel + (lua_Integer)(off / km_dtype_size(b->dtype))));
  return 2;
}

/* buffer.guards_intact({ b1, b2, ... }) -> nil | i: the index of the first buffer whose guard
 * zones changed (b:check_guards says how), all read with one wait for the stream. */
/* The buffers { b1, b2, ... } at idx into a boxed array (pushed) of n pointers and n
 * result slots. Returns n. */
static lua_Integer read_buffers(lua_State *L, int idx, const km_devbuf ***bs, uint64_t **bad) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer n = luaL_len(L, idx);
  luaL_argcheck(L, n >= 0 && n <= 4096, idx, "too many buffers");
  void *box = lua_newuserdatauv(L, (size_t)(n ? n : 1) * (sizeof(km_devbuf *) + sizeof(uint64_t)), 0);
  *bs = box;
  *bad = (uint64_t *)(*bs + n);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    (*bs)[i - 1] = buffer_check(L, -1);
    lua_pop(L, 1);
  }
  return n;
}

static int l_guards_intact(lua_State *L) {
  const km_devbuf **bs;
  uint64_t *bad;
  lua_Integer n = read_buffers(L, 1, &bs, &bad); /* boxed: freed by the collector if anything below raises */
  if (n == 0) return 0;
  km_cuda_util(L, "km_guards");
  check(L, km_devbufs_guards(bs, (size_t)n, km_cuda_stream(), bad), "reading the guards");
  for (lua_Integer i = 1; i <= n; i++)
    if (bad[i - 1]) { lua_pushinteger(L, i); return 1; }
  return 0;
}

/* buffer.reset_guards({ b1, b2, ... }): refills their guard zones, enqueued on the stream (one
 * launch per 16 buffers, no wait; b:reset_guards() is two memsets a buffer). */
static int l_reset_guards(lua_State *L) {
  const km_devbuf **bs;
  uint64_t *unused;
  lua_Integer n = read_buffers(L, 1, &bs, &unused);
  if (n == 0) return 0;
  km_cuda_util(L, "km_guards");
  check(L, km_devbufs_reset_guards(bs, (size_t)n, km_cuda_stream()), "filling the guards");
  return 0;
}

/* ---- the ledger: checks enqueued with no wait, read back once ----
 *
 *   buffer.ledger() -> L              device slots (8 bytes each), kept for reuse
 *   L:begin(n) -> L                   a new batch of at most n slots (more raise; grows the
 *                                     array where it must: freeing the old one waits for the device)
 *   L:guards({ b, ... }) -> i         one slot per buffer: guard bytes changed (0: intact)
 *   L:random_check(b, law[, lines]) -> i  one slot: elements not what b:random(law) writes
 *                                     (lines = { key, shift }: of a sample of the lines)
 *   L:digest({ { ptr, nbytes }, ... }) -> i   one slot per range: buffer.digest's value
 *   L:perturb_check(b, ptr, key) -> i one slot: elements of b not what buffer.copy_in(b,
 *                                     ptr, b's bytes, key) writes
 *   compare.enqueue(a, b, opts, L) -> i       (km.compare) an allclose's KM_CMP_SLOTS slots
 *   L:read([between]) -> true | nil, msg, code   the used slots copied back: the batch's one
 *                                     wait. between: a function called once the copy is
 *                                     enqueued, before the wait, whose GPU work (enqueued
 *                                     behind the copy) is not waited for: the judge's next
 *                                     input refresh runs while the host judges this batch
 *   L:u64(i) -> integer               slot i after read (1-based, as the ops return)
 *
 * L:begin zeroes the batch's n slots (one memset, in stream order) and each op adds into its
 * own; slot numbers index this batch. The results are in device memory until read: a caller
 * reads them before any code it does not trust runs on the device again (km.judge's timed
 * checks do, once per check). */
#define KM_LEDGER_MT "km.Ledger"
typedef struct {
  CUdeviceptr dev;
  CUcontext ctx;
  size_t cap, used, limit; /* slots allocated, taken in this batch, begun for it */
  uint64_t *host;          /* page-locked (cuMemAllocHost): the copy back is asynchronous */
  CUevent done;            /* recorded behind the copy back (a read with `between`) */
} km_ledger;

static km_ledger *ledger_check(lua_State *L, int idx) { return luaL_checkudata(L, idx, KM_LEDGER_MT); }

/* The device array, the host slots and the event, where their context is still current (a
 * context that went took them with it). */
static void ledger_free(km_ledger *g) {
  CUcontext ctx = NULL;
  int live = km_cu && km_cu->cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && ctx == g->ctx;
  if (live && g->dev) km_cu->cuMemFree(g->dev);
  if (live && g->host) km_cu->cuMemFreeHost(g->host);
  if (live && g->done) km_cu->cuEventDestroy(g->done);
  g->dev = 0, g->host = NULL, g->done = NULL;
  g->cap = g->used = 0;
}

static int ledger_gc(lua_State *L) {
  ledger_free(ledger_check(L, 1));
  return 0;
}

static int l_ledger(lua_State *L) {
  km_ledger *g = lua_newuserdatauv(L, sizeof *g, 0);
  memset(g, 0, sizeof *g);
  luaL_setmetatable(L, KM_LEDGER_MT);
  return 1;
}

static int g_begin(lua_State *L) {
  km_ledger *g = ledger_check(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n >= 0 && n <= (1 << 24), 2, "slots out of range");
  const km_cuda_api *cu = km_cuda_check(L);
  CUcontext ctx = NULL;
  cu->cuCtxGetCurrent(&ctx);
  if (ctx != g->ctx) g->dev = 0, g->host = NULL, g->done = NULL, g->cap = 0; /* another context: the old went with it */
  if ((size_t)n > g->cap) {
    size_t cap = (size_t)n < 256 ? 256 : (size_t)n * 2;
    ledger_free(g); /* freeing waits for the device: only when the batch outgrows the array */
    void *h = NULL;
    CUdeviceptr p;
    check(L, cu->cuMemAllocHost(&h, cap * 8), "ledger (host slots)");
    g->host = h, g->ctx = ctx;
    check(L, cu->cuMemAlloc(&p, cap * 8), "ledger");
    g->dev = p, g->cap = cap;
  }
  g->used = 0;
  g->limit = (size_t)n;
  /* every slot of the batch zeroed at once, in stream order (after the last batch's copy
   * back): the ops add into their slots */
  if (n) check(L, cu->cuMemsetD8Async(g->dev, 0, (size_t)n * 8, km_cuda_stream()), "ledger");
  lua_settop(L, 1);
  return 1;
}

/* The next n slots of the batch: their device address; pushes their 1-based index. */
static CUdeviceptr ledger_take(lua_State *L, km_ledger *g, size_t n) {
  if (!g->dev || g->used + n > g->limit)
    luaL_error(L, "ledger: %d slot(s) wanted, %d of the %d begun are left", (int)n, (int)(g->limit - g->used), (int)g->limit);
  CUdeviceptr p = g->dev + 8 * g->used;
  lua_pushinteger(L, (lua_Integer)g->used + 1);
  g->used += n;
  return p;
}

CUdeviceptr km_ledger_take(lua_State *L, int idx, size_t n) { return ledger_take(L, ledger_check(L, idx), n); }

const uint64_t *km_ledger_slots(lua_State *L, int idx, lua_Integer i, size_t n) {
  km_ledger *g = ledger_check(L, idx);
  luaL_argcheck(L, i >= 1 && (size_t)i - 1 + n <= g->used, 2, "no such slot in this batch");
  return g->host + (i - 1);
}

static int g_guards(lua_State *L) {
  km_ledger *g = ledger_check(L, 1);
  const km_devbuf **bs;
  uint64_t *bad;
  lua_Integer n = read_buffers(L, 2, &bs, &bad);
  km_cuda_util(L, "km_guards");
  CUdeviceptr acc = ledger_take(L, g, (size_t)(n ? n : 1));
  if (n) check(L, km_devbufs_guards_at(bs, (size_t)n, km_cuda_stream(), acc), "the guards");
  return 1;
}

static int g_random_check(lua_State *L) {
  km_ledger *g = ledger_check(L, 1);
  km_buffer *b = buffer_check(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  int d;
  double a, c;
  uint64_t seed;
  random_law(L, 3, b, &d, &a, &c, &seed);
  /* 4: { key = k, shift = s }: a sample of the lines (km_lines), or nil: every line */
  km_lines lines, *smp = NULL;
  if (!lua_isnoneornil(L, 4)) km_check_lines(L, 4, 4, &lines), smp = &lines;
  km_cuda_util(L, "km_random_check");
  CUdeviceptr acc = ledger_take(L, g, 1);
  check(L, km_devbuf_random_check_at(b, d, a, c, seed, km_cuda_stream(), acc, smp), "random_check");
  return 1;
}

static int g_perturb_check(lua_State *L) {
  km_ledger *g = ledger_check(L, 1);
  km_buffer *b = buffer_check(L, 2);
  lua_Integer p = luaL_checkinteger(L, 3);
  luaL_argcheck(L, p > 0, 3, "a device pointer expected");
  uint64_t key = (uint64_t)luaL_checkinteger(L, 4);
  km_cuda_util(L, "km_perturb");
  CUdeviceptr acc = ledger_take(L, g, 1);
  check(L, km_devbuf_perturb_at(b, (CUdeviceptr)p, key, km_cuda_stream(), acc), "perturb_check");
  return 1;
}

static int g_digest(lua_State *L) {
  km_ledger *g = ledger_check(L, 1);
  CUdeviceptr *ptrs;
  uint64_t *bytes;
  lua_Integer n = read_ranges(L, 2, &ptrs, &bytes);
  km_cuda_util(L, "km_checksum");
  CUdeviceptr acc = ledger_take(L, g, (size_t)(n ? n : 1));
  if (n) check(L, km_dev_digest_at(ptrs, bytes, (size_t)n, km_cuda_stream(), acc), "digest");
  return 1;
}

static int g_read(lua_State *L) {
  km_ledger *g = ledger_check(L, 1);
  const km_cuda_api *cu = km_cuda_check(L);
  int between = !lua_isnoneornil(L, 2);
  if (between) luaL_checktype(L, 2, LUA_TFUNCTION);
  CUstream s = km_cuda_stream();
  CUresult r = CUDA_SUCCESS;
  if (g->used) r = cu->cuMemcpyDtoHAsync(g->host, g->dev, g->used * 8, s);
  if (!between) {
    /* the whole context, as cuda.synchronize: work on any stream is done and its error seen */
    if (r == CUDA_SUCCESS) r = cu->cuCtxSynchronize();
    if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "synchronize");
    lua_pushboolean(L, 1);
    return 1;
  }
  /* behind the copy on the stream, which everything the batch checks ran on (the candidate's
   * launches, the references' kernels, torch's on kmrun's stream): the slots are read when
   * the event is, and a fault before it (sticky) is the event's error too */
  if (r == CUDA_SUCCESS && !g->done) r = cu->cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = cu->cuEventRecord(g->done, s);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "synchronize");
  lua_pushvalue(L, 2);
  int called = lua_pcall(L, 0, 0, 0);
  r = cu->cuEventSynchronize(g->done); /* waited for even when `between` raised */
  if (called != LUA_OK) return lua_error(L);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "synchronize");
  lua_pushboolean(L, 1);
  return 1;
}

static int g_u64(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)*km_ledger_slots(L, 1, luaL_checkinteger(L, 2), 1));
  return 1;
}

/* b:reset_guards() -> b: refills both guard zones (for reusing a buffer) */
static int b_reset_guards(lua_State *L) {
  km_buffer *b = buffer_check(L, 1);
  check(L, km_devbuf_reset_guards(b), "filling the guards");
  lua_settop(L, 1);
  return 1;
}

static int b_len(lua_State *L) { return b_numel(L); }

/* ---- view methods and functions ---- */

static km_buffer *view_check(lua_State *L, int idx) {
  km_buffer *b = view_buffer(L, idx);
  if (!b) luaL_typeerror(L, idx, KM_VIEW_MT);
  return b;
}

static int v_dtype(lua_State *L) { lua_pushstring(L, km_dtype_name(view_check(L, 1)->dtype)); return 1; }
static int v_numel(lua_State *L) { lua_pushinteger(L, view_check(L, 1)->numel); return 1; }
static int v_nbytes(lua_State *L) { lua_pushinteger(L, (lua_Integer)view_check(L, 1)->bytes); return 1; }
static int v_elsize(lua_State *L) { lua_pushinteger(L, (lua_Integer)km_dtype_size(view_check(L, 1)->dtype)); return 1; }
static int v_shape(lua_State *L) {
  km_buffer *b = view_check(L, 1);
  lua_createtable(L, b->ndim, 0);
  for (int i = 0; i < b->ndim; i++) {
    lua_pushinteger(L, b->shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}
static int v_tostring(lua_State *L) {
  km_view *v = luaL_checkudata(L, 1, KM_VIEW_MT);
  if (v->epoch != view_epoch || !v->b->base) { lua_pushliteral(L, "km.BufferView (expired)"); return 1; }
  lua_pushfstring(L, "km.BufferView %s[%I elements]", km_dtype_name(v->b->dtype), (lua_Integer)v->b->numel);
  return 1;
}

/* buffer.view(b) -> a view of b, valid until the next buffer.revoke_views() */
static int l_view(lua_State *L) {
  buffer_check(L, 1);
  km_view *v = lua_newuserdatauv(L, sizeof *v, 1); /* [b, view] */
  v->b = lua_touserdata(L, 1);
  v->epoch = view_epoch;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1); /* the view pins its buffer */
  luaL_setmetatable(L, KM_VIEW_MT);
  return 1;
}

/* buffer.unwrap(x) -> the buffer behind x when x is a live view, else nil (never raises:
 * x may be anything launch code returned) */
static int l_unwrap(lua_State *L) {
  km_view *v = lua_touserdata(L, 1);
  int ok = v && lua_type(L, 1) == LUA_TUSERDATA && lua_getmetatable(L, 1);
  if (ok) {
    ok = lua_topointer(L, -1) == view_mt && v->epoch == view_epoch && v->b->base;
    lua_pop(L, 1);
  }
  if (!ok) { lua_pushnil(L); return 1; }
  lua_getiuservalue(L, 1, 1);
  return 1;
}

/* buffer.revoke_views(): every view made so far stops working */
static int l_revoke_views(lua_State *L) {
  view_epoch++;
  (void)L;
  return 0;
}

int luaopen_km_buffer(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"dtype", b_dtype}, {"numel", b_numel}, {"nbytes", b_nbytes}, {"ptr", b_ptr},
      {"elsize", b_elsize}, {"shape", b_shape}, {"freed", b_freed},
      {"fill", b_fill}, {"zero", b_zero}, {"poison", b_poison}, {"random", b_random}, {"random_check", b_random_check},
      {"copy", b_copy}, {"clone", b_clone},
      {"to_string", b_to_string}, {"from_string", b_from_string},
      {"to_table", b_to_table}, {"from_table", b_from_table}, {"save", b_save},
      {"checksum", b_checksum}, {"check_guards", b_check_guards}, {"reset_guards", b_reset_guards}, {"free", buffer_release},
      {NULL, NULL}};
  km_newclass(L, KM_BUFFER_MT, methods, buffer_release);
  luaL_getmetatable(L, KM_BUFFER_MT);
  buffer_mt = lua_topointer(L, -1);
  lua_pushcfunction(L, b_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, b_len);
  lua_setfield(L, -2, "__len");
  lua_pop(L, 1);
  static const luaL_Reg view_methods[] = {
      {"dtype", v_dtype}, {"numel", v_numel}, {"nbytes", v_nbytes}, {"elsize", v_elsize},
      {"shape", v_shape}, {NULL, NULL}};
  km_newclass(L, KM_VIEW_MT, view_methods, NULL);
  luaL_getmetatable(L, KM_VIEW_MT);
  view_mt = lua_topointer(L, -1);
  lua_pushcfunction(L, v_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, v_numel);
  lua_setfield(L, -2, "__len");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable"); /* getmetatable(view) reveals nothing */
  lua_pop(L, 1);
  static const luaL_Reg ledger_methods[] = {{"begin", g_begin}, {"guards", g_guards}, {"random_check", g_random_check}, {"perturb_check", g_perturb_check},
                                            {"digest", g_digest}, {"read", g_read}, {"u64", g_u64}, {NULL, NULL}};
  km_newclass(L, KM_LEDGER_MT, ledger_methods, ledger_gc);
  static const luaL_Reg fns[] = {{"new", l_new}, {"load", l_load}, {"view", l_view}, {"unwrap", l_unwrap},
                                 {"revoke_views", l_revoke_views}, {"digest", l_digest}, {"copy_in", l_copy_in},
                                 {"lines_copy", l_lines_copy}, {"lines_drawn", l_lines_drawn},
                                 {"guards_intact", l_guards_intact}, {"reset_guards", l_reset_guards}, {"live", l_live}, {"reset_peak", l_reset_peak}, {"ledger", l_ledger}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushinteger(L, DEFAULT_GUARD);
  lua_setfield(L, -2, "DEFAULT_GUARD");
  return 1;
}
